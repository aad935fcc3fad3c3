//go:build linux

package soft

import (
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/rdmanet/rdma/internal/testsupport"
	"github.com/rdmanet/rdma/verbs"
)

// The package's tests gather from a peer's second connection on, so that
// a few connections exercise the doorbell; TestShmDoorbellGathersAfter
// checks the default.
func init() { shmGatherAfter = 1 }

// selfDoorbell is the doorbell of this process's connections to itself
// (both ends of the tests' connections run here), nil if none.
func selfDoorbell(t *testing.T) *shmDoorbell {
	start, ok := procStartTime(int32(os.Getpid()))
	require.True(t, ok)
	shmDoorbells.mu.Lock()
	defer shmDoorbells.mu.Unlock()
	return shmDoorbells.m[shmPeerProc{pid: int32(os.Getpid()), start: start}]
}

// gatheredPairs builds n connected pairs of shared-memory transports whose
// setups join the doorbell of this process (the peer of both ends), as
// the CM's exchange does after SO_PEERCRED.
func gatheredPairs(t *testing.T, n int) (a, b []*shmTransport) {
	t.Helper()
	for range n {
		ta, tb := tcpPair(t)
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		require.NoError(t, err)
		ua, ub := unixConnOf(t, fds[0]), unixConnOf(t, fds[1])
		la, err := newShmLocal(shmRingMin)
		require.NoError(t, err)
		lb, err := newShmLocal(shmRingMin)
		require.NoError(t, err)
		la.joinDoorbell(peerPID(ua))
		lb.joinDoorbell(peerPID(ub))
		require.NoError(t, sendSetup(ua, la))
		pb, err := recvSetup(ub, shmRingMin)
		require.NoError(t, err)
		require.NoError(t, sendSetup(ub, lb))
		pa, err := recvSetup(ua, shmRingMin)
		require.NoError(t, err)
		ua.Close()
		ub.Close()
		x, err := newShmTransport(ta, la, pa)
		require.NoError(t, err)
		y, err := newShmTransport(tb, lb, pb)
		require.NoError(t, err)
		a, b = append(a, x), append(b, y)
	}
	t.Cleanup(func() {
		for i := range a {
			a[i].close()
			b[i].close()
		}
	})
	return a, b
}

// Every connection to a peer process but the first shares one doorbell:
// one eventfd, not one per connection, and the doorbell's goroutine ends
// with the last of them.
func TestShmDoorbellShared(t *testing.T) {
	require.Nil(t, selfDoorbell(t), "no connection to this process yet")
	before := openFDs(t)
	const n = 8
	a, b := gatheredPairs(t, n)
	gathered := 0
	for i := range n {
		for _, x := range []*shmTransport{a[i], b[i]} {
			if x.gathered {
				gathered++
			}
		}
	}
	assert.Equal(t, 2*n-1, gathered, "all ends but the first gathered")
	d := selfDoorbell(t)
	require.NotNil(t, d)
	for i := range n {
		for _, x := range []*shmTransport{a[i], b[i]} {
			require.Same(t, d, x.bell)
			if x.gathered {
				assert.Equal(t, d.fd, x.myEv)
			}
		}
	}
	// Each end holds the peer's eventfd and its TCP connection (the
	// rings' memfds are closed once mapped); one end of all has an
	// eventfd of its own, and the doorbell has one.
	assert.Equal(t, 2*n*2+1+1, openFDs(t)-before, "descriptors of %d connections", n)

	for i := range n {
		a[i].close()
		b[i].close()
	}
	select {
	case <-d.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the doorbell's goroutine still runs after its last connection closed")
	}
	assert.Nil(t, selfDoorbell(t))
	assert.Equal(t, before, openFDs(t), "descriptors after close")
}

// At most shmGatherMax connections gather on a doorbell: the others keep
// eventfds of their own (a doorbell's sleeps and wake-ups walk its waits,
// idle ones too), and a gathered connection's place is free again once it
// closes.
func TestShmDoorbellGathersAtMostMax(t *testing.T) {
	defer func(m int) { shmGatherMax = m }(shmGatherMax)
	shmGatherMax = 3
	a, b := gatheredPairs(t, 4)
	gathered := func(ts ...*shmTransport) (n int) {
		for _, x := range ts {
			if x.gathered {
				n++
				assert.Nil(t, x.ev)
			} else {
				assert.NotNil(t, x.ev, "a connection not gathered has its own eventfd")
			}
		}
		return n
	}
	all := func() []*shmTransport {
		var ts []*shmTransport
		for i := range a {
			ts = append(ts, a[i], b[i])
		}
		return ts
	}
	assert.Equal(t, 3, gathered(all()...), "gathered of 8 ends")
	d := selfDoorbell(t)
	require.NotNil(t, d)
	for i := range a { // the gathered ones free their places
		for _, x := range []*shmTransport{a[i], b[i]} {
			if x.gathered {
				x.close()
			}
		}
	}
	c, e := gatheredPairs(t, 1)
	assert.Equal(t, 2, gathered(c[0], e[0]), "places freed by the closed connections")
	assert.Same(t, d, c[0].bell)
}

// The first shmGatherAfter connections to a peer process keep their own
// eventfds (one hand-off a wake-up); the doorbell opens with the next and
// gathers it and those after it.
func TestShmDoorbellGathersAfter(t *testing.T) {
	defer func(n int) { shmGatherAfter = n }(shmGatherAfter)
	shmGatherAfter = 4
	a, b := gatheredPairs(t, 4) // 8 ends, all to this process
	var ends []*shmTransport
	for i := range a {
		ends = append(ends, a[i], b[i])
	}
	for i, x := range ends {
		assert.Equal(t, i >= 4, x.gathered, "end %d", i)
		assert.Equal(t, i < 4, x.ev != nil, "end %d has its own eventfd", i)
	}
}

// With gathering off, a connection keeps its own eventfd and no doorbell
// is made.
func TestShmDoorbellOff(t *testing.T) {
	defer shmGather.Store(shmGather.Swap(false))
	a, b := gatheredPairs(t, 3)
	for i := range a {
		for _, x := range []*shmTransport{a[i], b[i]} {
			assert.False(t, x.gathered)
			assert.Nil(t, x.bell)
			assert.NotNil(t, x.ev)
		}
	}
	assert.Nil(t, selfDoorbell(t))
}

// Round trips on many gathered connections at once, with no spin (every
// wait sleeps): no wake-up is lost, and a burst costs fewer signals than
// it has messages.
func TestShmDoorbellRoundTrips(t *testing.T) {
	defer SetSharedMemorySpin(SetSharedMemorySpin(0))
	const n, rounds = 16, 300
	a, b := gatheredPairs(t, n)
	d := selfDoorbell(t)
	require.NotNil(t, d)
	wakeups := d.wakeups.Load()
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		wg.Add(2)
		go func() { // echo
			defer wg.Done()
			var h [hdrLen]byte
			for range rounds {
				if err := b[i].readHeader(&h); err != nil {
					errs <- err
					return
				}
				if err := writeFrame(b[i], &h, nil, nil); err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			var h [hdrLen]byte
			for r := range rounds {
				h[0] = byte(r)
				if err := writeFrame(a[i], &h, nil, nil); err != nil {
					errs <- err
					return
				}
				var got [hdrLen]byte
				if err := a[i].readHeader(&got); err != nil {
					errs <- err
					return
				}
				if got != h {
					errs <- errProtocol
					return
				}
			}
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(60 * time.Second):
		t.Fatal("round trips stuck: a wake-up was lost")
	}
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	woken := d.wakeups.Load() - wakeups
	t.Logf("%d round trips on %d connections: the doorbell woke %d times", n*rounds, n, woken)
	assert.Positive(t, woken, "the waits slept through the doorbell")
}

// A writer that waits for ring space on a gathered connection sleeps on
// the doorbell and wakes when the consumer frees space.
func TestShmDoorbellWriterWaitsForSpace(t *testing.T) {
	defer SetSharedMemorySpin(SetSharedMemorySpin(0))
	a, b := gatheredPairs(t, 2)
	w, r := a[1], b[1]
	require.True(t, w.gathered)
	payload := make([]byte, 3*shmRingMin)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := w.writev([][]byte{payload}, nil, true)
		errc <- err
	}()
	require.Eventually(t, func() bool {
		d := w.bell
		d.mu.Lock()
		defer d.mu.Unlock()
		return w.waits[sleepWriter].idx >= 0
	}, 10*time.Second, time.Millisecond, "the writer sleeps on the doorbell")
	got := make([]byte, len(payload))
	require.NoError(t, r.readPayload(got, gateRef{}))
	require.NoError(t, <-errc)
	assert.Equal(t, payload, got)
}

// Close, a read deadline and the peer's death each wake a reader asleep
// on the doorbell, with the error that says which.
func TestShmDoorbellWakesOnLocalEvents(t *testing.T) {
	defer SetSharedMemorySpin(SetSharedMemorySpin(0))
	a, b := gatheredPairs(t, 4)
	asleep := func(x *shmTransport) func() bool {
		return func() bool {
			x.bell.mu.Lock()
			defer x.bell.mu.Unlock()
			return x.waits[sleepReader].idx >= 0
		}
	}
	read := func(x *shmTransport) chan error {
		c := make(chan error, 1)
		go func() {
			var h [hdrLen]byte
			c <- x.readHeader(&h)
		}()
		require.Eventually(t, asleep(x), 10*time.Second, time.Millisecond)
		return c
	}
	wait := func(c chan error) error {
		select {
		case err := <-c:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("the reader was not woken")
			return nil
		}
	}

	c := read(b[1])
	b[1].close()
	assert.ErrorIs(t, wait(c), net.ErrClosed)

	c = read(b[2])
	require.NoError(t, b[2].setReadDeadline(time.Now().Add(20*time.Millisecond)))
	assert.ErrorIs(t, wait(c), os.ErrDeadlineExceeded)

	// The peer's end goes (its TCP connection closes, as when its process
	// dies): the reader sees the stream cut; the other connections are
	// untouched.
	c = read(b[3])
	a[3].tcp.Close()
	assert.Error(t, wait(c))
	var h [hdrLen]byte
	h[0] = 9
	require.NoError(t, writeFrame(a[0], &h, nil, nil))
	var got [hdrLen]byte
	require.NoError(t, b[0].readHeader(&got))
	assert.Equal(t, h, got)
}

// A producer signals a consumer's doorbell once per arming: a second ring
// of the same arming is not signalled, a new arming is, and a ring
// without a doorbell (rgen 0) or of a peer we do not know always is.
func TestShmDoorbellMustSignal(t *testing.T) {
	d := &shmDoorbell{}
	assert.True(t, d.mustSignal(0))
	assert.True(t, d.mustSignal(0))
	assert.True(t, d.mustSignal(5))
	assert.False(t, d.mustSignal(5))
	assert.True(t, d.mustSignal(6))
	assert.True(t, (*shmDoorbell)(nil).mustSignal(6))
	// Numbers are looked up per peer process: one that another peer's
	// ring shows (whatever it wrote there) silences nothing here.
	other := &shmDoorbell{}
	assert.True(t, other.mustSignal(6))
	assert.False(t, d.mustSignal(6))
}

func init() { testsupport.RegisterPeer("soft-kill-gathered", killGatheredChild) }

// killGatheredChild runs in a peer process: it dials args[1] connections
// to args[0], on shared memory at once, and waits to be killed.
func killGatheredChild(args []string) int {
	n, err := strconv.Atoi(args[1])
	if err != nil {
		return 2
	}
	SetSharedMemorySwitch(0)
	p, _ := verbs.Lookup("soft")
	ch, _ := p.CreateEventChannel()
	dst, err := net.ResolveTCPAddr("tcp", args[0])
	if err != nil {
		return 3
	}
	for range n {
		if code := childConnect(ch, dst); code != 0 {
			return code
		}
		if e, err := ch.GetEvent(time.Now().Add(5 * time.Second)); err != nil || e.Type != verbs.EventEstablished {
			return 5
		}
	}
	time.Sleep(time.Minute)
	return 6
}

// A peer process with several connections on one doorbell dies (SIGKILL):
// every one of them is seen DISCONNECTED and flushes its posted receive,
// and the doorbell of that process goes with them.
func TestShmDoorbellPeerKilled(t *testing.T) {
	defer SetSharedMemorySwitch(SetSharedMemorySwitch(0))
	const n = 3
	ch := newEventChannel()
	defer ch.Close()
	lid := newCMID(ch)
	defer lid.Destroy()
	require.NoError(t, lid.BindAddr(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 24)}))
	require.NoError(t, lid.Listen(n))
	cmd := testsupport.StartPeer(t, "soft-kill-gathered", nil, lid.LocalAddr().String(), strconv.Itoa(n))

	type end struct {
		id  verbs.CMID
		qp  verbs.QP
		cq  verbs.CQ
		pd  verbs.PD
		mr  verbs.MR
		mem *verbs.Memory
	}
	var ends []end
	for established := 0; established < n; {
		req, err := ch.GetEvent(time.Now().Add(10 * time.Second))
		require.NoError(t, err)
		if req.Type == verbs.EventEstablished {
			established++
			continue
		}
		require.Equal(t, verbs.EventConnectRequest, req.Type)
		var e end
		e.id = req.ID
		e.pd, err = req.ID.Context().AllocPD()
		require.NoError(t, err)
		e.cq, err = req.ID.Context().CreateCQ(16, nil)
		require.NoError(t, err)
		e.qp, err = req.ID.CreateQP(e.pd, &verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		require.NoError(t, err)
		e.mem, err = verbs.AllocMemory(4096)
		require.NoError(t, err)
		e.mr, err = e.pd.RegMR(e.mem.Bytes(), verbs.AccessLocalWrite)
		require.NoError(t, err)
		require.NoError(t, req.ID.Accept(&verbs.ConnParam{RetryCount: 7, RNRRetryCount: 7}))
		ends = append(ends, e)
	}
	for _, e := range ends {
		require.Eventually(t, func() bool { return Carrier(e.qp) == "shm" }, 10*time.Second, time.Millisecond)
		require.NoError(t, e.qp.PostRecv([]verbs.RecvWR{{WRID: 42, SG: []verbs.SGE{verbs.SGEOf(e.mr, e.mem.Bytes()[:64])}}}))
	}
	gathered := 0
	for _, e := range ends {
		q := e.qp.(*qp)
		q.mu.Lock()
		st, _ := q.tr.(*shmTransport)
		if sw, ok := q.tr.(*switchTransport); ok {
			st = sw.ok.Load()
		}
		if st != nil && st.gathered {
			gathered++
		}
		q.mu.Unlock()
	}
	require.Equal(t, n-1, gathered, "all connections to the peer but the first on its doorbell")
	start, ok := procStartTime(int32(cmd.Process.Pid))
	require.True(t, ok)
	proc := shmPeerProc{pid: int32(cmd.Process.Pid), start: start}

	require.NoError(t, cmd.Process.Kill())
	for range n {
		ev, err := ch.GetEvent(time.Now().Add(10 * time.Second))
		require.NoError(t, err)
		require.Equal(t, verbs.EventDisconnected, ev.Type)
	}
	for _, e := range ends {
		wc := make([]verbs.WC, 2)
		k, err := e.cq.Poll(wc)
		require.NoError(t, err)
		require.Equal(t, 1, k)
		assert.Equal(t, verbs.WCWRFlushErr, wc[0].Status)
		a, err := e.qp.Query()
		require.NoError(t, err)
		assert.Equal(t, verbs.QPSErr, a.State)
		require.NoError(t, e.qp.Destroy())
		require.NoError(t, e.id.Destroy())
		require.NoError(t, e.mr.Dereg())
		require.NoError(t, e.cq.Destroy())
		require.NoError(t, e.pd.Dealloc())
		require.NoError(t, e.mem.Free())
	}
	require.Eventually(t, func() bool {
		shmDoorbells.mu.Lock()
		defer shmDoorbells.mu.Unlock()
		return shmDoorbells.m[proc] == nil
	}, 10*time.Second, time.Millisecond, "the dead peer's doorbell released")
}

// Connections through the CM come and go in batches: while a batch lives
// all but its first share the doorbell, each carries round trips through
// it, and once a batch is closed no doorbell, descriptor or goroutine of
// it is left.
func TestShmDoorbellChurn(t *testing.T) {
	if bootID() == "" {
		t.Skip("no boot ID: shared memory is never offered")
	}
	defer SetSharedMemory(SetSharedMemory(true))
	defer SetSharedMemorySwitch(SetSharedMemorySwitch(0))
	lch, lid := setupListener(t, net.IPv4(127, 0, 0, 24))
	fds := openFDs(t)
	goroutines := runtime.NumGoroutine()
	for range 3 {
		var conns []*switchConn
		for range 4 {
			sc := dialSwitchConn(t, lch, lid)
			require.Eventually(t, func() bool { return Carrier(sc.aq) == "shm" && Carrier(sc.pq) == "shm" },
				10*time.Second, 100*time.Microsecond)
			conns = append(conns, sc)
		}
		d := selfDoorbell(t)
		require.NotNil(t, d)
		woken := d.wakeups.Load()
		for _, sc := range conns {
			sc.roundTrips(t, 20)
		}
		assert.Positive(t, d.wakeups.Load()-woken, "round trips woke the doorbell")
		for _, sc := range conns {
			sc.close()
		}
		require.Eventually(t, func() bool { return selfDoorbell(t) == nil }, 10*time.Second, time.Millisecond,
			"the doorbell released with the last connection")
	}
	deadline := time.Now().Add(10 * time.Second)
	for (openFDs(t) > fds || runtime.NumGoroutine() > goroutines) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	assert.LessOrEqual(t, openFDs(t), fds, "descriptors after the churn")
	if !assert.LessOrEqual(t, runtime.NumGoroutine(), goroutines, "goroutines after the churn") {
		buf := make([]byte, 1<<20)
		t.Logf("%s", buf[:runtime.Stack(buf, true)])
	}
}
