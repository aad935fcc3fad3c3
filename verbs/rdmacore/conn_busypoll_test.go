//go:build cgo && linux

package rdmacore_test

import (
	"testing"
	"time"

	"github.com/rdmanet/rdma"
	"github.com/rdmanet/rdma/internal/conntest"
	"github.com/rdmanet/rdma/internal/testsupport"
	"github.com/rdmanet/rdma/verbs/rdmacore"
)

// The suite again with Config.BusyPoll, where Reads and Writes never sleep
// on the completion channel: deadlines, Close, half-close, peer death and
// the stacks must come out the same from a spinning wait.
func TestConnSuiteBusyPoll(t *testing.T) {
	conntest.Run(t, conntest.Config{
		RDMA:         rdma.Config{Provider: rdmacore.ProviderName, BusyPoll: true},
		Host:         testsupport.SoftRoCEHost(t),
		PeerEnv:      []string{rdma.BusyPollEnv + "=1"},
		Small:        true,
		DetectWithin: 30 * time.Second,
		Skip: map[string]string{
			"PeerPaused":             "TestConnSuite checks it: a paused peer's conns live by the transport and the heartbeat, however Reads wait",
			"PeerPausedUnderTimeout": "TestConnSuite checks it",
		},
	})
}
