package rdma_test

import (
	"strings"
	"testing"

	"github.com/rdmanet/rdma"
	"github.com/rdmanet/rdma/internal/conntest"
	"github.com/rdmanet/rdma/verbs/soft"
)

// rdma.Conn's suite on the soft provider, once per path soft has between
// two ends on one host: shared memory (its default) and TCP (the path
// between hosts), and once more with Config.Wire "rsocket" (RsocketConn).
// Each run checks that its path carries the bytes, in one process and
// across two. The runs "shm-buffers" and "tcp-buffers" run the suite's
// conns from and into rdma.Buffers with the rendezvous threshold at 4 KiB,
// (conntest.Config.Buffers), so that its transfers take the zero-copy
// paths, exposing a Write's bytes through a memory window; the run
// "tcp-buffers-registered" by a registration of their own, as on a device
// without windows. verbs/rdmacore runs the
// same suite in the Soft-RoCE VM.
func TestConnSuite(t *testing.T) {
	for _, path := range []struct {
		name string
		shm  bool
		env  string
		wire string
		// small: the wire's own behaviour at smaller volumes; the runs
		// above already push full-size transfers through soft's paths.
		small   bool
		skip    map[string]string
		buffers bool
		// registered: a rendezvous registers what it exposes, as on a
		// device without memory windows (soft has them).
		registered bool
	}{
		{"shm", true, "RDMA_SOFT_SHM=1 RDMA_SOFT_SHM_SWITCH=0", "", false, nil, false, false},
		{"tcp", false, "RDMA_SOFT_SHM=0", "", false, nil, false, false},
		{"shm-buffers", true, "RDMA_SOFT_SHM=1 RDMA_SOFT_SHM_SWITCH=0", "", false, pauseSkips, true, false},
		{"tcp-buffers", false, "RDMA_SOFT_SHM=0", "", false, pauseSkips, true, false},
		{"tcp-buffers-registered", false, "RDMA_SOFT_SHM=0 RDMA_MEMORY_WINDOWS=0", "", false, registeredSkips, true, true},
		{"rsocket", true, "RDMA_SOFT_SHM=1 RDMA_SOFT_SHM_SWITCH=0", rdma.WireRsocket, true, map[string]string{
			"PeerKilled": "the rsocket wire ends the stream at a disconnect, as rsocket.c does and its C peers expect: " +
				"a killed peer reads as io.EOF there, where this subtest wants an error (Writes do fail)",
			"PeerStopped": "RsocketConn has no heartbeat (rsocket's wire defines none; its keepalive is answered " +
				"by the transport): Config.PeerTimeout does not apply to it",
			"PeerPausedUnderTimeout": "as PeerStopped: Config.PeerTimeout does not apply to RsocketConn " +
				"(PeerPaused checks that its conns outlive a pause)",
		}, false, false},
	} {
		t.Run(path.name, func(t *testing.T) {
			cfg := rdma.Config{Provider: rdma.ProviderSoft, Wire: path.wire}
			prev := soft.SetSharedMemory(path.shm)
			defer soft.SetSharedMemory(prev)
			// Conns move to shared memory at once, not after 64 KiB, so
			// that every subtest runs on the path it names.
			prevSwitch := soft.SetSharedMemorySwitch(0)
			defer soft.SetSharedMemorySwitch(prevSwitch)
			defer rdma.SetNoWindows(rdma.SetNoWindows(path.registered))
			carrier := "tcp"
			if path.shm {
				carrier = "shm"
			}
			conntest.Run(t, conntest.Config{
				RDMA:          cfg,
				Host:          "127.0.0.1",
				PeerEnv:       strings.Fields(path.env),
				Transport:     rdma.SoftCarrier,
				WantTransport: carrier,
				Small:         path.small,
				Skip:          path.skip,
				Buffers:       path.buffers,
			})
		})
	}
}

// pauseSkips are the subtests the runs from and into Buffers leave out: a
// paused peer's conns survive or fail by the transport and the heartbeat,
// whatever a Write copies; the runs shm and tcp check them on each path.
var pauseSkips = map[string]string{
	"PeerPaused":             "runs shm and tcp check it",
	"PeerPausedUnderTimeout": "runs shm and tcp check it",
}

// registeredSkips are the subtests the run whose rendezvous register
// leaves out.
var registeredSkips = map[string]string{
	"PeerPaused":             pauseSkips["PeerPaused"],
	"PeerPausedUnderTimeout": pauseSkips["PeerPausedUnderTimeout"],
	"ZeroAllocs": "each rendezvous registers the Write's bytes (soft's RegMR allocates the MR); " +
		"the windowed runs shm-buffers and tcp-buffers assert the rendezvous' zero allocations, " +
		"the runs shm and tcp the copying path's",
}
