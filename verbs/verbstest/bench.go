package verbstest

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/testsupport"
	"github.com/rdmanet/rdma/verbs"
)

// benchSuite builds a suite for the exported benchmark functions.
func benchSuite(b *testing.B, cfg Config) *suite {
	p, err := verbs.Lookup(cfg.Provider)
	require.NoError(b, err)
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	return &suite{cfg: cfg, p: p}
}

// waitCQ returns completions from cq, sleeping on its completion channel
// (ReqNotify + GetEvent) when there are none: the event-driven way a
// net.Conn built on the verbs waits.
func waitCQ(cq verbs.CQ, cc verbs.CompChannel, wc []verbs.WC) (int, error) {
	for {
		if n, err := cq.Poll(wc); n > 0 || err != nil {
			return n, err
		}
		if err := cq.ReqNotify(false); err != nil {
			return 0, err
		}
		if n, err := cq.Poll(wc); n > 0 || err != nil {
			return n, err
		}
		got, err := cc.GetEvent()
		if err != nil {
			return 0, err
		}
		cc.AckEvents(got, 1)
	}
}

// startTimer starts the measured part of a benchmark that moves size bytes
// an operation, counting its allocations.
func startTimer(b *testing.B, size int) {
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
}

// waitOK is waitCQ for a benchmark: it returns the completions, failing b
// on an error or on a completion that is not a success.
func waitOK(b *testing.B, cq verbs.CQ, cc verbs.CompChannel, wc []verbs.WC) []verbs.WC {
	b.Helper()
	n, err := waitCQ(cq, cc, wc)
	if err != nil {
		b.Fatal(err)
	}
	for _, w := range wc[:n] {
		if w.Status != verbs.WCSuccess {
			b.Fatalf("completion %+v", w)
		}
	}
	return wc[:n]
}

// BenchWrite measures RDMA WRITE throughput with size-byte writes, keeping
// up to 32 in flight; a write counts once its completion says the data is
// in the peer's memory.
func BenchWrite(b *testing.B, cfg Config, size int) {
	benchOneSided(b, cfg, verbs.OpRDMAWrite, size, 32)
}

// BenchRead measures RDMA READ throughput with size-byte reads of the
// peer's memory, depth in flight: with depth 1, the pattern of a
// rendezvous, which READs a Write's bytes and waits for them.
func BenchRead(b *testing.B, cfg Config, size, depth int) {
	benchOneSided(b, cfg, verbs.OpRDMARead, size, depth)
}

// BenchReadWindow is BenchRead through a memory window bound to the
// peer's bytes (the rendezvous' way on a device with windows).
func BenchReadWindow(b *testing.B, cfg Config, size, depth int) {
	benchOneSidedVia(b, cfg, verbs.OpRDMARead, size, depth, true)
}

// benchOneSided runs b.N one-sided operations op of size bytes between a
// pair, depth (at most 64) in flight.
func benchOneSided(b *testing.B, cfg Config, op verbs.Opcode, size, depth int) {
	benchOneSidedVia(b, cfg, op, size, depth, false)
}

// benchOneSidedVia is benchOneSided, through a window bound to the
// peer's bytes when window says so.
func benchOneSidedVia(b *testing.B, cfg Config, op verbs.Opcode, size, depth int, window bool) {
	s := benchSuite(b, cfg)
	o := defaultOpts()
	if window {
		o = mwOpts()
	}
	o.sharedCQ = true
	o.memSize = 4 * size
	o.cap.MaxSendWR = 64
	c, sv := s.pair(b, o)
	rkey := sv.mr.RKey()
	if window {
		w, err := sv.pd.AllocMW()
		if err != nil {
			b.Skipf("no memory windows: %v", err)
		}
		defer w.Dealloc()
		rkey = verbs.NextRKey(w.RKey())
		bind := []verbs.SendWR{{Opcode: verbs.OpBindMW, Flags: verbs.SendSignaled, Bind: &verbs.MWBind{MW: w, MR: sv.mr,
			Addr: verbs.AddrOf(sv.buf), Length: uint64(size), Access: verbs.AccessRemoteRead | verbs.AccessRemoteWrite, RKey: rkey}}}
		if err := sv.qp.PostSend(bind); err != nil {
			b.Fatal(err)
		}
		waitOK(b, sv.scq, sv.cc, make([]verbs.WC, 1))
	}
	wr := []verbs.SendWR{{Opcode: op, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:size])}, RemoteAddr: verbs.AddrOf(sv.buf), RKey: rkey}}
	wc := make([]verbs.WC, 64)
	startTimer(b, size)
	posted, done := 0, 0
	for done < b.N {
		for posted < b.N && posted-done < depth {
			wr[0].WRID = uint64(posted)
			if err := c.qp.PostSend(wr); err != nil {
				b.Fatal(err)
			}
			posted++
		}
		done += len(waitOK(b, c.scq, c.cc, wc))
	}
	b.StopTimer()
}

// BenchPingPong measures the round trip of a size-byte SEND answered by a
// size-byte SEND, both sides waiting on completion channels.
func BenchPingPong(b *testing.B, cfg Config, size int) {
	s := benchSuite(b, cfg)
	o := defaultOpts()
	o.sharedCQ = true
	o.memSize = 1 << 16
	c, sv := s.pair(b, o)
	recvWR := func(e *endpoint) []verbs.RecvWR {
		return []verbs.RecvWR{{SG: []verbs.SGE{verbs.SGEOf(e.mr, e.buf[size:2*size])}}}
	}
	sendWR := func(e *endpoint) []verbs.SendWR {
		return []verbs.SendWR{{Opcode: verbs.OpSend, SG: []verbs.SGE{verbs.SGEOf(e.mr, e.buf[:size])}}}
	}
	crecv, csend, srecv, ssend := recvWR(c), sendWR(c), recvWR(sv), sendWR(sv)
	require.NoError(b, sv.qp.PostRecv(srecv))
	require.NoError(b, c.qp.PostRecv(crecv))
	errc := make(chan error, 1)
	go func() {
		// The echo side: every receive is answered; every 16th send is
		// signaled so the send queue drains, as hardware requires.
		wc := make([]verbs.WC, 16)
		for i := 0; ; {
			n, err := waitCQ(sv.scq, sv.cc, wc)
			if err != nil {
				errc <- err
				return
			}
			for _, w := range wc[:n] {
				if w.Status != verbs.WCSuccess {
					errc <- nil // flushed at teardown
					return
				}
				if w.Opcode != verbs.WCRecv {
					continue
				}
				if err := sv.qp.PostRecv(srecv); err != nil {
					errc <- err
					return
				}
				i++
				ssend[0].Flags = 0
				if i%16 == 0 {
					ssend[0].Flags = verbs.SendSignaled
				}
				if err := sv.qp.PostSend(ssend); err != nil {
					errc <- err
					return
				}
			}
		}
	}()
	wc := make([]verbs.WC, 16)
	startTimer(b, size)
	for i := 0; i < b.N; i++ {
		csend[0].Flags = 0
		if i%16 == 15 {
			csend[0].Flags = verbs.SendSignaled
		}
		if err := c.qp.PostSend(csend); err != nil {
			b.Fatal(err)
		}
		for got := false; !got; {
			for _, w := range waitOK(b, c.scq, c.cc, wc) {
				if w.Opcode == verbs.WCRecv {
					got = true
					if err := c.qp.PostRecv(crecv); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
	}
	b.StopTimer()
	require.NoError(b, c.id.Disconnect())
	require.NoError(b, <-errc)
}

// BenchTCPWrite is BenchWrite's baseline: size-byte writes on a loopback
// TCP connection, counted once the reader has them.
func BenchTCPWrite(b *testing.B, ip net.IP, size int) {
	a, z := testsupport.TCP(b, ip.String())
	done := make(chan error, 1)
	n := int64(b.N) * int64(size)
	go func() {
		_, err := io.CopyBuffer(io.Discard, io.LimitReader(z, n), make([]byte, size))
		done <- err
	}()
	buf := make([]byte, size)
	startTimer(b, size)
	for i := 0; i < b.N; i++ {
		if _, err := a.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	require.NoError(b, <-done)
	b.StopTimer()
}

// BenchTCPPingPong is BenchPingPong's baseline on loopback TCP.
func BenchTCPPingPong(b *testing.B, ip net.IP, size int) {
	a, z := testsupport.TCP(b, ip.String())
	go func() {
		buf := make([]byte, size)
		for {
			if _, err := io.ReadFull(z, buf); err != nil {
				return
			}
			if _, err := z.Write(buf); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, size)
	startTimer(b, size)
	for i := 0; i < b.N; i++ {
		if _, err := a.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(a, buf); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
}

// BenchExpose measures what exposing size bytes to the peer for one
// transfer and revoking it costs: with windows, a bind and a local
// invalidation posted together, the invalidation's completion awaited
// (what rdma.Conn's rendezvous does); without, a registration of the
// bytes for remote READ and its deregistration. A window's case skips on
// a device without windows.
func BenchExpose(b *testing.B, cfg Config, size int, windows bool) {
	s := benchSuite(b, cfg)
	o := mwOpts()
	o.sharedCQ = true
	o.memSize = size
	_, sv := s.pair(b, o)
	wc := make([]verbs.WC, 4)
	if !windows {
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			mr, err := sv.pd.RegMR(sv.buf, verbs.AccessRemoteRead)
			if err != nil {
				b.Fatal(err)
			}
			if err := mr.Dereg(); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		return
	}
	w, err := sv.pd.AllocMW()
	if err != nil {
		b.Skipf("no memory windows: %v", err)
	}
	defer w.Dealloc()
	bind := verbs.MWBind{MW: w, MR: sv.mr, Addr: verbs.AddrOf(sv.buf), Length: uint64(size), Access: verbs.AccessRemoteRead}
	wr := []verbs.SendWR{{Opcode: verbs.OpBindMW, Bind: &bind}, {Opcode: verbs.OpLocalInv, Flags: verbs.SendSignaled}}
	key := w.RKey()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		key = verbs.NextRKey(key)
		bind.RKey, wr[1].InvalidateRKey = key, key
		if err := sv.qp.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		waitOK(b, sv.scq, sv.cc, wc)
	}
	b.StopTimer()
}
