//go:build cgo && linux

package rdmacore

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/rdmanet/rdma/verbs"
)

// directPair is a direct waiter on an eventfd standing in for a completion
// channel, and the try that takes its events.
func directPair(t *testing.T) (*directWaiter, int, func(uintptr) bool) {
	t.Helper()
	ev, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(ev) })
	d, err := newDirectWaiter(ev)
	require.NoError(t, err)
	try := func(fd uintptr) bool {
		var b [8]byte
		_, err := unix.Read(int(fd), b[:])
		return err != unix.EAGAIN
	}
	return d, ev, try
}

func signalFD(fd int) {
	one := [8]byte{1}
	_, _ = unix.Write(fd, one[:])
}

// The event wakes the blocked thread; nothing else does.
func TestDirectWaitWakesOnEvent(t *testing.T) {
	d, ev, try := directPair(t)
	defer d.close()
	res := make(chan error, 1)
	go func() {
		done, err := d.wait(try)
		if !done {
			err = errors.New("handed over without the event")
		}
		res <- err
	}()
	time.Sleep(2 * time.Millisecond)
	select {
	case err := <-res:
		t.Fatalf("returned before the event: %v", err)
	default:
	}
	signalFD(ev)
	require.NoError(t, <-res)
}

// A deadline set from another goroutine, in the past, interrupts a blocked
// wait; a deadline in the future ends one when it passes.
func TestDirectWaitDeadline(t *testing.T) {
	d, _, try := directPair(t)
	defer d.close()
	res := make(chan error, 1)
	go func() { _, err := d.wait(try); res <- err }()
	time.Sleep(2 * time.Millisecond)
	d.setDeadline(time.Unix(1, 0))
	select {
	case err := <-res:
		assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
	case <-time.After(5 * time.Second):
		t.Fatal("a past deadline did not interrupt the wait")
	}
	d.setDeadline(time.Now().Add(3 * time.Millisecond))
	done, err := d.wait(try)
	assert.True(t, done)
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
}

// After directSpan the waiter hands over (to the poller) and gives its
// thread back.
func TestDirectWaitHandsOver(t *testing.T) {
	d, _, try := directPair(t)
	defer d.close()
	start := time.Now()
	done, err := d.wait(try)
	require.NoError(t, err)
	assert.False(t, done)
	assert.GreaterOrEqual(t, time.Since(start), directSpan)
}

// Close ends a blocked wait with ErrClosed and returns once it is out.
func TestDirectWaitClose(t *testing.T) {
	d, _, try := directPair(t)
	res := make(chan error, 1)
	go func() { _, err := d.wait(try); res <- err }()
	for d.inside.Load() == 0 {
		time.Sleep(100 * time.Microsecond)
	}
	d.close()
	assert.Zero(t, d.inside.Load())
	assert.ErrorIs(t, <-res, verbs.ErrClosed)
}

// The slots bound the blocked threads.
func TestDirectSlots(t *testing.T) {
	defer func(n int32) { directSlots = n }(directSlots)
	directSlots = 2
	require.True(t, takeDirectSlot())
	require.True(t, takeDirectSlot())
	assert.False(t, takeDirectSlot())
	giveDirectSlot()
	assert.True(t, takeDirectSlot())
	giveDirectSlot()
	giveDirectSlot()
	assert.Zero(t, directInUse.Load())
}

// A passed deadline ends a wait even with an event there, as on the
// poller, and the event stays for the next wait.
func TestDirectWaitDeadlineBeforeEvent(t *testing.T) {
	d, ev, try := directPair(t)
	defer d.close()
	signalFD(ev)
	d.setDeadline(time.Unix(1, 0))
	done, err := d.wait(try)
	assert.True(t, done)
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
	d.setDeadline(time.Time{})
	done, err = d.wait(try)
	assert.True(t, done)
	assert.NoError(t, err, "the event stayed queued")
}
