package testsupport

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"
)

func init() {
	RegisterPeer("spin", func([]string) int {
		// Threads that run: every one must stop.
		for i := 0; i < 3; i++ {
			go func() {
				for {
					runtime.Gosched()
				}
			}()
		}
		time.Sleep(time.Minute)
		return 0
	})
}

// Stop returns once every thread of the process is stopped; once it runs
// again, they are not.
func TestStop(t *testing.T) {
	cmd := StartPeer(t, "spin", nil)
	tasks := fmt.Sprintf("/proc/%d/task", cmd.Process.Pid)
	Stop(t, cmd.Process)
	if runtime.GOOS == "linux" && !allStopped(tasks) {
		t.Fatal("Stop returned before every thread stopped")
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "linux" {
		return
	}
	for end := time.Now().Add(10 * time.Second); allStopped(tasks); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the process still reads as stopped 10 s after SIGCONT")
		}
	}
}
