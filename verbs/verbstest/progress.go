package verbstest

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

func init() { register("ProgressWithoutConsumer", testProgressWithoutConsumer) }

// testProgressWithoutConsumer: a side whose application has stopped
// waiting for completions still answers its peer. On a NIC the hardware
// serves RDMA READs and acknowledges RDMA WRITEs whatever the application
// does; a provider that moves frames in software (soft lends its receive
// role to a goroutine waiting in GetEvent) must keep doing so after that
// goroutine got its event and went away, without a call from it, a poll of
// its CQ or a yield of the scheduler.
//
// Each round: c's waiter blocks in GetEvent for a SEND from the peer, gets
// it and leaves; then, while nothing on c's side calls into the provider,
// the peer READs what c's memory holds and WRITEs into it, signaled, and
// both complete.
func testProgressWithoutConsumer(t *testing.T, s *suite) {
	o := defaultOpts()
	o.sharedCQ = true
	c, sv := s.pair(t, o)
	const rounds = 20
	for r := range rounds {
		postRecv(t, c, uint64(r), 0, 64)
		require.NoError(t, c.scq.ReqNotify(false))
		woke := make(chan error, 1)
		go func() {
			cq, err := c.cc.GetEvent()
			if err == nil {
				c.cc.AckEvents(cq, 1)
			}
			woke <- err
		}()
		postSend(t, sv, verbs.SendWR{WRID: 1, Opcode: verbs.OpSend, Flags: verbs.SendSignaled,
			SG: []verbs.SGE{verbs.SGEOf(sv.mr, sv.buf[:64])}})
		s.pollOne(t, sv.scq, verbs.WCSuccess)
		require.NoError(t, <-woke, "round %d: the waiter's event", r)
		wc := s.pollOne(t, c.rcq, verbs.WCSuccess)
		require.Equal(t, uint64(r), wc.WRID)

		// From here on, c's side makes no call at all.
		want := bytes.Repeat([]byte{byte(r + 1)}, 256)
		copy(c.buf[8192:], want)
		s.readVia(t, sv, sv.buf[8192:8192+256], verbs.AddrOf(c.buf[8192:]), c.mr.RKey(), verbs.WCSuccess)
		require.Equal(t, want, sv.buf[8192:8192+256], "round %d: what the READ brought", r)

		copy(sv.buf[16384:], want)
		postSend(t, sv, verbs.SendWR{WRID: 3, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
			SG:         []verbs.SGE{verbs.SGEOf(sv.mr, sv.buf[16384:16384+256])},
			RemoteAddr: verbs.AddrOf(c.buf[16384:]), RKey: c.mr.RKey()})
		wc = s.pollOne(t, sv.scq, verbs.WCSuccess)
		require.Equal(t, uint64(3), wc.WRID, "round %d: the WRITE's acknowledgement", r)
		require.Equal(t, want, c.buf[16384:16384+256], "round %d: what the WRITE put", r)
	}
}
