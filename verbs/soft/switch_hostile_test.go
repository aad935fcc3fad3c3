//go:build linux

package soft_test

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
	"github.com/rdmanet/rdma/verbs/soft"
)

func init() { hostileRoles["marker"] = markerChild }

// markerChild is a listener (on arg's address) that answers one connection
// request with a REP that picks "TCP now, shared memory to follow", at
// once sends its switch marker, before any invitation, and then sends
// nothing more, until its stdin closes.
func markerChild(arg string) int {
	ln, err := net.Listen("tcp", arg)
	if err != nil {
		fmt.Println("error", err)
		return 3
	}
	fmt.Println(ln.Addr())
	c, err := ln.Accept()
	if err != nil {
		return 3
	}
	var hdr [8]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return 4
	}
	if _, err := io.CopyN(io.Discard, c, int64(binary.LittleEndian.Uint16(hdr[6:]))); err != nil {
		return 4
	}
	if _, err := c.Write(append(soft.RawREP(soft.TransportShmSwitch), soft.SwitchMarker()...)); err != nil {
		return 5
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	c.Close()
	return 0
}

// A listener (as nobody, when the test runs as root) that picks shared
// memory to follow and sends its switch marker at once, then stalls, ends
// the connection within the switch's bound, instead of leaving its reader
// waiting forever: before the connection invited it (the active side moves
// after 64 KiB), the marker is a protocol error; after (the switch at 0
// bytes: the invitation goes out at once), the wait for the exchange,
// which the peer never joins, ends by its deadline. Before, the first case
// waited on an exchange that was never started, and the connection hung.
func TestSwitchMarkerFirst(t *testing.T) {
	uid := 0
	if os.Geteuid() == 0 {
		uid = nobody
	}
	for name, c := range map[string]struct {
		after int
		delay time.Duration // of the ESTABLISHED event, the engine running
	}{
		"before the invitation":                   {64 << 10, 0},
		"after the invitation":                    {0, 0},
		"before the invitation, ESTABLISHED late": {64 << 10, 200 * time.Millisecond},
	} {
		after := c.after
		t.Run(name, func(t *testing.T) {
			// A connection whose engine stopped before its ESTABLISHED
			// went out reports ESTABLISHED first, then DISCONNECTED, as a
			// CM does; the dial below wants ESTABLISHED.
			if c.delay > 0 {
				soft.SetEstablishedHook(func() { time.Sleep(c.delay) })
				defer soft.SetEstablishedHook(nil)
			}
			defer soft.SetSharedMemorySwitch(soft.SetSharedMemorySwitch(after))
			defer soft.SetSharedMemory(soft.SetSharedMemory(true))
			_, in, out := startChild(t, "marker", "127.0.6.1:0", uid)
			defer in.Close()
			addr, err := out.ReadString('\n')
			require.NoError(t, err)
			c, err := dialSoft(addr[:len(addr)-1])
			if c != nil {
				defer c.close()
			}
			require.NoError(t, err)
			start := time.Now()
			ev, err := c.ch.GetEvent(time.Now().Add(10 * time.Second))
			require.NoError(t, err, "the connection hangs at the marker")
			require.Equal(t, verbs.EventDisconnected, ev.Type)
			t.Logf("disconnected after %v", time.Since(start))
		})
	}
}
