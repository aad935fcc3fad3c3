package rdma

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/testsupport"
)

// The counters on a real kernel RDMA stack (the Soft-RoCE VM, where rxe0 is
// a device; it skips elsewhere), as TestStatsExact, TestStatsRsocketExact
// and TestStatsRemoteExact check them on soft: a stream conn's and an
// rsocket-wire conn's bytes and messages, the one-sided operations, and the
// device port's own counters, which move with the traffic.
func TestStatsRDMACore(t *testing.T) {
	dev, ip := testsupport.SoftRoCE(t)
	host := ip.String()
	sent := func(dc []DeviceCounters) (n uint64, found bool) {
		for _, d := range dc {
			if d.Device != dev {
				continue
			}
			found = found || len(d.Counters)+len(d.HWCounters) > 0
			// rxe's own packet counter, and the IB port counter where
			// the driver keeps it.
			n += d.HWCounters["sent_pkts"] + d.Counters["port_xmit_packets"]
		}
		return n, found
	}
	devBefore, found := sent(ReadProcessStats().Devices)
	require.True(t, found, "ReadProcessStats lists %s's port counters", dev)
	before := ReadProcessStats().Totals

	cfg := &Config{Provider: ProviderRDMACore}
	l, err := (&ListenConfig{Config: cfg}).Listen(context.Background(), "rdma", net.JoinHostPort(host, "0"))
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	cc, sc := testsupport.Connect(t, l, dialer(l, cfg))
	c, s := cc.(*Conn), sc.(*Conn)

	// 50 Writes of 1000 bytes, each read before the next: one message each.
	msg := make([]byte, 1000)
	for i := range 50 {
		fill(msg, byte(i))
		n, err := c.Write(msg)
		require.NoError(t, err)
		require.Equal(t, len(msg), n)
		_, err = io.ReadFull(s, msg)
		require.NoError(t, err)
	}
	cs, ss := c.Stats(), s.Stats()
	assert.Equal(t, [4]uint64{50000, 0, 50, 0}, [4]uint64{cs.BytesSent, cs.BytesReceived, cs.MessagesSent, cs.MessagesReceived}, "dialer")
	assert.Equal(t, [4]uint64{0, 50000, 0, 50}, [4]uint64{ss.BytesSent, ss.BytesReceived, ss.MessagesSent, ss.MessagesReceived}, "listener")
	for _, x := range []ConnStats{cs, ss} {
		assert.Equal(t, ProviderRDMACore, x.Provider)
		assert.Equal(t, ProviderRDMACore, x.Path)
		assert.Equal(t, "stream", x.Wire)
	}

	// One-sided: 3 WriteRemote of 4 KiB, 2 ReadRemote of 1 KiB, 1 exposure.
	target := allocBuffer(t, 16<<10)
	local := allocBuffer(t, 16<<10)
	d, err := s.Expose(target, 0, 16<<10, AccessRead|AccessWrite)
	require.NoError(t, err)
	for i := range 3 {
		require.NoError(t, c.WriteRemote(d, i*4096, local.Bytes()[:4096]))
	}
	for range 2 {
		require.NoError(t, c.ReadRemote(d, 0, local.Bytes()[:1024]))
	}
	cs = c.Stats()
	assert.Equal(t, [4]uint64{3, 3 * 4096, 2, 2 * 1024}, [4]uint64{cs.RemoteWrites, cs.RemoteBytesWritten, cs.RemoteReads, cs.RemoteBytesRead}, "one-sided")
	assert.Equal(t, uint64(1), s.Stats().Exposures)

	// The rsocket wire on the same device.
	rcfg := &Config{Provider: ProviderRDMACore, Wire: WireRsocket}
	rl, err := (&ListenConfig{Config: rcfg}).Listen(context.Background(), "rdma", net.JoinHostPort(host, "0"))
	require.NoError(t, err)
	t.Cleanup(func() { rl.Close() })
	rc, rs := testsupport.Connect(t, rl, dialer(rl, rcfg))
	for range 20 {
		_, err := rc.Write(msg[:100])
		require.NoError(t, err)
		_, err = io.ReadFull(rs, msg[:100])
		require.NoError(t, err)
	}
	rcs, rss := rc.(*RsocketConn).Stats(), rs.(*RsocketConn).Stats()
	assert.Equal(t, [4]uint64{2000, 0, 20, 0}, [4]uint64{rcs.BytesSent, rcs.BytesReceived, rcs.MessagesSent, rcs.MessagesReceived}, "rsocket dialer")
	assert.Equal(t, [4]uint64{0, 2000, 0, 20}, [4]uint64{rss.BytesSent, rss.BytesReceived, rss.MessagesSent, rss.MessagesReceived}, "rsocket listener")
	assert.Equal(t, ProviderRDMACore, rcs.Path)
	assert.Equal(t, WireRsocket, rcs.Wire)

	for _, x := range []net.Conn{c, s, rc, rs} {
		require.NoError(t, x.Close())
	}
	after := ReadProcessStats().Totals
	assert.Equal(t, uint64(50000+2000), after.BytesSent-before.BytesSent, "process totals keep what the closed conns sent")
	assert.Equal(t, uint64(3), after.RemoteWrites-before.RemoteWrites)

	// The device counted the packets (the counters are the kernel's,
	// updated as the driver sends; allow it a moment).
	deadline := time.Now().Add(5 * time.Second)
	for {
		devAfter, _ := sent(ReadProcessStats().Devices)
		if devAfter >= devBefore+50 || time.Now().After(deadline) {
			assert.GreaterOrEqual(t, devAfter, devBefore+50, "%s's sent packets: at least one a message", dev)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
}
