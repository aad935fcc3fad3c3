//go:build cgo && linux

package rdmacore

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// epollTargets is the set of descriptors registered in this process's
// epoll instances (Go's runtime poller among them), read from
// /proc/self/fdinfo: what the kernel wakes an epoll_wait for.
func epollTargets(t *testing.T) map[int]bool {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	targets := map[int]bool{}
	for _, e := range ents {
		if link, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || link != "anon_inode:[eventpoll]" {
			continue
		}
		f, err := os.Open("/proc/self/fdinfo/" + e.Name())
		if err != nil {
			continue // closed meanwhile
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if fields := strings.Fields(sc.Text()); len(fields) > 1 && fields[0] == "tfd:" {
				fd, err := strconv.Atoi(fields[1])
				require.NoError(t, err)
				targets[fd] = true
			}
		}
		f.Close()
	}
	return targets
}

// registeredFD is the descriptor w's poller registration watches; -1 when
// it is off the poller.
func (w *fdWaiter) registeredFD() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	fd := -1
	if w.rc != nil {
		_ = w.rc.Control(func(u uintptr) { fd = int(u) })
	}
	return fd
}

// An on-demand waiter (a completion channel's) is on the runtime poller
// only from a wait there until leavePoller: while its owner's waits block
// their own threads, the kernel must not also wake the runtime's epoll_wait
// for each event.
func TestOnDemandWaiterLeavesThePoller(t *testing.T) {
	ev, try := eventfdChannel(t)
	w, err := newOnDemandFDWaiter(ev, "eventfd")
	require.NoError(t, err)
	require.False(t, w.onPoller(), "on the poller before any wait there")
	require.False(t, epollTargets(t)[w.fd], "the direct wait's descriptor is in an epoll set")

	waited := make(chan error, 1)
	go func() { waited <- w.wait(try) }()
	require.Eventually(t, w.onPoller, 5*time.Second, time.Millisecond)
	reg := w.registeredFD()
	require.NotEqual(t, -1, reg)
	require.True(t, epollTargets(t)[reg], "a wait on the poller, and its descriptor in no epoll set")
	_, err = unix.Write(ev, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	require.NoError(t, err)
	select {
	case err := <-waited:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the wait on the poller missed the event")
	}

	w.leavePoller()
	assert.False(t, w.onPoller())
	assert.False(t, epollTargets(t)[reg], "still in an epoll set after leavePoller")
	var st unix.Stat_t
	assert.Error(t, unix.Fstat(reg, &st), "the registration's descriptor is still open")

	// A deadline set off the poller holds for the next wait there.
	require.NoError(t, w.setDeadline(time.Now().Add(-time.Second)))
	assert.ErrorIs(t, w.wait(try), os.ErrDeadlineExceeded)
	require.NoError(t, w.setDeadline(time.Time{}))

	reg = w.registeredFD()
	require.NoError(t, w.close())
	assert.False(t, epollTargets(t)[reg], "still in an epoll set after close")
	assert.Error(t, unix.Fstat(w.fd, &st), "close left the waiter's duplicate open")
}

// A waiter for the life of its descriptor (a CM event channel's) is on the
// poller from the start, and close takes it off.
func TestFDWaiterOnThePollerForLife(t *testing.T) {
	ev, _ := eventfdChannel(t)
	w, err := newFDWaiter(ev, "eventfd")
	require.NoError(t, err)
	reg := w.registeredFD()
	require.Equal(t, w.fd, reg)
	assert.True(t, epollTargets(t)[reg])
	w.leavePoller() // not on demand: stays
	assert.True(t, epollTargets(t)[reg])
	require.NoError(t, w.close())
	assert.False(t, epollTargets(t)[reg])
}
