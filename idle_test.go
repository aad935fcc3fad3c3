package rdma

import (
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs/soft"
)

// processCPU is the CPU time (user and system) the process has used.
func processCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A thousand idle connections (both ends in this process, each having
// echoed a byte) cost next to no CPU, on each of soft's paths: nothing
// spins or polls while nothing moves. The keepalive and the heartbeat are
// set a minute apart so that nothing moves at all in the window (at their
// defaults, a probe and a ping every 2 s each way, the same thousand
// connections used 3-6% of a CPU here). The bound, 2% of one CPU for 2,000
// endpoints, is far above what a timer costs and far below one spinning or
// polling loop (100%).
func TestIdleConnsCostNoCPU(t *testing.T) {
	const n = 1000
	needFDs(t, 8*n)
	for _, path := range []struct {
		name string
		shm  bool
	}{{"shm", true}, {"tcp", false}} {
		t.Run(path.name, func(t *testing.T) {
			prev := soft.SetSharedMemory(path.shm)
			defer soft.SetSharedMemory(prev)
			prevSwitch := soft.SetSharedMemorySwitch(0)
			defer soft.SetSharedMemorySwitch(prevSwitch)
			cfg := softConfig()
			cfg.KeepAlive, cfg.PeerTimeout = time.Minute, 5*time.Minute
			ln := listen(t, cfg)
			served := make(chan net.Conn, n)
			go func() {
				for {
					s, err := ln.Accept()
					if err != nil {
						return
					}
					_ = echoOne(s)
					served <- s
				}
			}()
			conns := make([]net.Conn, 0, 2*n)
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			dial := dialer(ln, cfg)
			for i := range n {
				c, err := dial(ln.Addr().String())
				require.NoError(t, err, "conn %d", i)
				conns = append(conns, c)
				b := [1]byte{byte(i)}
				_, err = c.Write(b[:])
				require.NoError(t, err)
				_, err = io.ReadFull(c, b[:])
				require.NoError(t, err)
				conns = append(conns, <-served)
			}
			if path.shm {
				assert.Equal(t, "shm", SoftCarrier(conns[0]))
			}
			time.Sleep(500 * time.Millisecond) // the setup's stragglers
			const window = 2 * time.Second
			before := processCPU(t)
			time.Sleep(window)
			used := processCPU(t) - before
			t.Logf("%d idle connections (%d endpoints) used %v of CPU in %v", n, 2*n, used, window)
			assert.Less(t, used, window/50, "idle connections use CPU")
		})
	}
}
