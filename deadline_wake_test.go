package rdma

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A deadline moved later leaves a Read that sleeps for data asleep: raft
// moves its write deadline before every request while a Read of the
// connection waits for the answers, and go-redis moves both before every
// command. Before, each move woke the sleeping Read, which looked and
// slept again (a wake-up and a sleep each); now only a deadline set where
// none was, or moved sooner, wakes it.
func TestDeadlineMovedLaterLeavesReadAsleep(t *testing.T) {
	softTransports(t, func(t *testing.T, env []string) {
		c, s := pair(t, &Config{Provider: "soft"})
		// A conversation moves a same-host connection to shared memory.
		path := "soft-tcp"
		if env[0] == "RDMA_SOFT_SHM=1" {
			path = "soft-shm"
		}
		msg := make([]byte, 64)
		require.Eventually(t, func() bool {
			for _, x := range [][2]*Conn{{c, s}, {s, c}} {
				if _, err := x[0].Write(msg); err != nil {
					return false
				}
				if _, err := io.ReadFull(x[1], msg); err != nil {
					return false
				}
			}
			return c.Stats().Path == path && s.Stats().Path == path
		}, 10*time.Second, time.Millisecond, "the connection carried by %s", path)
		now := time.Now()
		require.NoError(t, c.SetReadDeadline(now.Add(time.Hour)))
		require.NoError(t, c.SetWriteDeadline(now.Add(time.Hour)))
		got := make(chan error, 1)
		go func() {
			b := make([]byte, 8)
			n, err := c.Read(b)
			if err == nil && (n != 1 || b[0] != 'x') {
				err = assert.AnError
			}
			got <- err
		}()
		time.Sleep(100 * time.Millisecond) // past the spin: the Read sleeps
		before := c.Stats().Sleeps
		const moves = 50
		for i := range moves {
			later := now.Add(time.Hour + time.Duration(i+1)*time.Millisecond)
			require.NoError(t, c.SetWriteDeadline(later))
			require.NoError(t, c.SetReadDeadline(later))
			time.Sleep(time.Millisecond) // time for a Read woken to sleep again
		}
		time.Sleep(20 * time.Millisecond)
		_, err := s.Write([]byte("x"))
		require.NoError(t, err)
		select {
		case err := <-got:
			require.NoError(t, err, "the Read returns what came, not a deadline")
		case <-time.After(10 * time.Second):
			t.Fatal("the Read did not return")
		}
		slept := c.Stats().Sleeps - before
		assert.Less(t, slept, uint64(moves/10), "the Read slept %d times over %d deadline moves", slept, 2*moves)
	})
}
