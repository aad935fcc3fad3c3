package verbstest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

func init() { register("FlushWakesEventWaiter", testFlushWakesEventWaiter) }

// testFlushWakesEventWaiter: a completion that another goroutine causes
// (flushes from rdma_disconnect, from a move to ERR, from posting to a QP in
// ERR) wakes a consumer already blocked in GetEvent on the armed CQ, as an
// event on hardware does; nothing from the peer is needed. The peer is
// silenced where the provider allows it, so that no reply from it can wake
// the waiter instead.
func testFlushWakesEventWaiter(t *testing.T, s *suite) {
	cases := []struct {
		name string
		// prepare runs before the waiter blocks; act while it is blocked.
		prepare func(t *testing.T, c *endpoint)
		act     func(t *testing.T, c *endpoint)
	}{
		{"Disconnect", func(t *testing.T, c *endpoint) {
			postRecv(t, c, 1, 0, 64)
		}, func(t *testing.T, c *endpoint) {
			require.NoError(t, c.id.Disconnect())
		}},
		{"ModifyToErr", func(t *testing.T, c *endpoint) {
			postRecv(t, c, 1, 0, 64)
		}, func(t *testing.T, c *endpoint) {
			require.NoError(t, c.qp.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.QPAttrState))
		}},
		{"PostSendInErr", func(t *testing.T, c *endpoint) {
			require.NoError(t, c.qp.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.QPAttrState))
		}, func(t *testing.T, c *endpoint) {
			postSend(t, c, verbs.SendWR{WRID: 1, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := defaultOpts()
			o.sharedCQ = true
			c, sv := s.pair(t, o)
			tc.prepare(t, c)
			require.NoError(t, c.scq.ReqNotify(false))
			n, err := c.scq.Poll(make([]verbs.WC, 1))
			require.NoError(t, err)
			require.Zero(t, n, "a completion before the test's action")
			done := make(chan error, 1)
			go func() {
				cq, err := c.cc.GetEvent()
				if err == nil {
					c.cc.AckEvents(cq, 1)
				}
				done <- err
			}()
			// Let the waiter block. Then traffic that completes nothing on
			// c's side (an RDMA WRITE from the peer): a provider that reads
			// its transport from GetEvent hands that reading to the waiter
			// between frames, and the waiter settles into a blocking read.
			time.Sleep(20 * time.Millisecond)
			postSend(t, sv, verbs.SendWR{Opcode: verbs.OpRDMAWrite, SG: []verbs.SGE{verbs.SGEOf(sv.mr, sv.buf[:64])},
				RemoteAddr: verbs.AddrOf(c.buf[4096:]), RKey: c.mr.RKey()})
			time.Sleep(20 * time.Millisecond)
			if s.cfg.SilencePeer != nil {
				s.cfg.SilencePeer(t, sv.qp)
			}
			tc.act(t, c)
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(time.Second):
				// Unblock the waiter before failing, for the leak check.
				_ = c.cc.Close()
				<-done
				c.cc = nil
				t.Fatal("GetEvent missed a completion caused by another goroutine")
			}
			wc := s.poll(t, c.scq, 1)[0]
			require.Equal(t, verbs.WCWRFlushErr, wc.Status, "completion %+v", wc)
		})
	}
}

func init() { register("ResponderAfterWaiterLeft", testResponderAfterWaiterLeft) }

// testResponderAfterWaiterLeft: a side whose application took one event
// and then calls nothing more still executes the peer's RDMA WRITEs and
// READs and acknowledges its SENDs, as a NIC does. A provider whose
// transport is read by GetEvent waiters must hand the reading back when
// the waiter leaves; each round has the waiter leave at a different point
// of the peer's traffic.
func testResponderAfterWaiterLeft(t *testing.T, s *suite) {
	o := defaultOpts()
	o.sharedCQ = true
	c, sv := s.pair(t, o)
	wc := make([]verbs.WC, 4)
	for round := 0; round < 20; round++ {
		postRecv(t, sv, uint64(round), 0, 64)
		require.NoError(t, sv.scq.ReqNotify(false))
		done := make(chan error, 1)
		go func() {
			cq, err := sv.cc.GetEvent()
			if err == nil {
				sv.cc.AckEvents(cq, 1)
			}
			done <- err
		}()
		postSend(t, c, verbs.SendWR{WRID: 1, Opcode: verbs.OpSend, Flags: verbs.SendSignaled,
			SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:64])}})
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(s.cfg.Timeout):
			_ = sv.cc.Close()
			<-done
			sv.cc = nil
			t.Fatal("the server's GetEvent missed the SEND")
		}
		n, err := sv.scq.Poll(wc)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, verbs.WCSuccess, wc[0].Status)
		s.pollOne(t, c.scq, verbs.WCSuccess) // the SEND, acknowledged
		// From now on the server's application does nothing. The first
		// rounds write at once, the later ones after a pause.
		if round >= 10 {
			time.Sleep(time.Duration(round-9) * time.Millisecond)
		}
		src := c.buf[8192 : 8192+4096]
		fill(src, byte(round))
		remote := sv.buf[65536+round*4096 : 65536+(round+1)*4096]
		postSend(t, c, verbs.SendWR{WRID: 2, Opcode: verbs.OpRDMAWrite,
			SG: []verbs.SGE{verbs.SGEOf(c.mr, src)}, RemoteAddr: verbs.AddrOf(remote), RKey: sv.mr.RKey()})
		back := c.buf[16384 : 16384+4096]
		clear(back)
		postSend(t, c, verbs.SendWR{WRID: 3, Opcode: verbs.OpRDMARead, Flags: verbs.SendSignaled,
			SG: []verbs.SGE{verbs.SGEOf(c.mr, back)}, RemoteAddr: verbs.AddrOf(remote), RKey: sv.mr.RKey()})
		got := s.pollOne(t, c.scq, verbs.WCSuccess)
		require.Equal(t, uint64(3), got.WRID)
		require.Equal(t, src, back, "round %d", round)
	}
}
