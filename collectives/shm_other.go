//go:build !linux

package collectives

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"time"
)

// AlgoEnv picks the engine (see shm_linux.go); off Linux only the conns
// exist, and "shm" is an error.
const AlgoEnv = "RDMA_COLL_ALGO"

// setupShm: the same-host segment needs memfds, descriptor passing and
// pidfds; elsewhere the group runs over its conns.
func setupShm(ctx context.Context, g *Group, conns []net.Conn) error {
	return attachShm(ctx, g, conns, os.Getenv(AlgoEnv))
}

func attachShm(ctx context.Context, g *Group, conns []net.Conn, mode string) error {
	if mode == "shm" {
		return fmt.Errorf("%s=shm: no shared segment on %s", AlgoEnv, runtime.GOOS)
	}
	return nil
}

type shmLiveness struct{}

func (*shmLiveness) dead(int) bool { return false }

func (*shmLiveness) pid(int) int { return 0 }

func readPeer(int, []byte, uint64) error { return errors.ErrUnsupported }

func writePeer(int, []byte, uint64) error { return errors.ErrUnsupported }

func osYield() { runtime.Gosched() }

func futexWait(*atomic.Uint64, uint32, time.Duration) {}

func futexWake(*atomic.Uint64) {}

func currentCPU() (uint32, bool) { return 0, false }

func moveOffCPU() (from, to uint32, moved bool) { return 0, 0, false }
