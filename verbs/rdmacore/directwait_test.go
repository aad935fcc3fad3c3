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

	"github.com/rdmanet/rdma/internal/testsupport"
	"github.com/rdmanet/rdma/verbs"
)

// eventfdChannel is a non-blocking eventfd standing in for a completion
// channel, closed when t ends, and the try that takes its events.
func eventfdChannel(t *testing.T) (int, func(uintptr) bool) {
	t.Helper()
	ev, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(ev) })
	return ev, func(fd uintptr) bool {
		var b [8]byte
		_, err := unix.Read(int(fd), b[:])
		return err != unix.EAGAIN
	}
}

// directPair is a direct waiter on an eventfdChannel, the eventfd and the
// try that takes its events.
func directPair(t *testing.T) (*directWaiter, int, func(uintptr) bool) {
	t.Helper()
	ev, try := eventfdChannel(t)
	d, err := newDirectWaiter(ev)
	require.NoError(t, err)
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

// A completion channel waited on directly is off the runtime poller (so an
// event wakes only the waiting thread); a wait that finds no direct slot
// puts it on, and the next direct wait takes it off again. The event still
// wakes the direct wait.
func TestCompChannelOffThePollerWhileWaitingDirectly(t *testing.T) {
	_, ip := testsupport.SoftRoCE(t)
	srv, cli, _, _, _ := connect(t, ip)
	cc, ok := cli.cc.(*compChannel)
	require.True(t, ok)
	idle := func() {
		t.Helper()
		require.NoError(t, cc.SetDeadline(time.Now().Add(20*time.Millisecond)))
		_, err := cc.GetEvent()
		require.ErrorIs(t, err, os.ErrDeadlineExceeded)
		require.NoError(t, cc.SetDeadline(time.Time{}))
	}
	require.False(t, cc.w.onPoller(), "a new channel is on the poller")

	held := 0
	for takeDirectSlot() {
		held++
	}
	idle() // no slot: on the poller
	for ; held > 0; held-- {
		giveDirectSlot()
	}
	require.True(t, cc.w.onPoller(), "a wait without a direct slot did not go on the poller")
	reg := cc.w.registeredFD()
	require.True(t, epollTargets(t)[reg])

	idle() // a direct wait
	assert.False(t, cc.w.onPoller(), "a direct wait left the channel on the poller")
	assert.False(t, epollTargets(t)[reg])

	// An event wakes the direct wait.
	require.NoError(t, cli.qp.PostRecv([]verbs.RecvWR{{WRID: 2, SG: []verbs.SGE{verbs.SGEOf(cli.mr, cli.mem.Bytes()[:64])}}}))
	require.NoError(t, cli.cq.ReqNotify(false))
	got := make(chan error, 1)
	go func() {
		q, err := cc.GetEvent()
		if err == nil && q != cli.cq {
			err = errors.New("the event named another CQ")
		}
		if err == nil {
			cc.AckEvents(q, 1)
		}
		got <- err
	}()
	require.NoError(t, srv.qp.PostSend([]verbs.SendWR{{WRID: 3, Opcode: verbs.OpSend, Flags: verbs.SendSignaled | verbs.SendInline,
		SG: []verbs.SGE{verbs.SGEOf(srv.mr, srv.mem.Bytes()[8192:8256])}}}))
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("no completion event")
	}
	assert.False(t, cc.w.onPoller())
	assert.Equal(t, verbs.WCSuccess, cli.wait(t).Status)
	assert.Equal(t, verbs.WCSuccess, srv.wait(t).Status)
}
