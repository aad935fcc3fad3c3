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
