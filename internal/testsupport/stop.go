package testsupport

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Stop stops p (SIGSTOP) and returns once every thread of it has stopped:
// the signal is delivered asynchronously, and a process that runs a moment
// longer may answer what the test sends next. Linux only (it reads /proc);
// elsewhere it returns after the signal.
func Stop(t testing.TB, p *os.Process) {
	t.Helper()
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("stopping process %d: %v", p.Pid, err)
	}
	tasks := fmt.Sprintf("/proc/%d/task", p.Pid)
	if _, err := os.Stat(tasks); err != nil {
		return
	}
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if allStopped(tasks) {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("process %d did not stop within 10 s", p.Pid)
		}
	}
}

// allStopped reports whether every thread under the /proc task directory
// is in state T (stopped).
func allStopped(tasks string) bool {
	stats, _ := filepath.Glob(filepath.Join(tasks, "*", "stat"))
	if len(stats) == 0 {
		return false
	}
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			return false
		}
		// pid (comm) state ...: comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+2 >= len(s) || s[i+2] != 'T' {
			return false
		}
	}
	return true
}
