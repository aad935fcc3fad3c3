package rdma

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/testsupport"
)

// The one-sided API on a real kernel RDMA stack (the Soft-RoCE VM, where
// rxe0 is a device; it skips elsewhere): bytes written, notified and read
// back, and the attacker's forged, stretched and revoked Descs and read of
// write-only memory, refused by the rxe driver's own checks, each breaking
// only the attacker's connection.
func TestRemoteRDMACore(t *testing.T) {
	ip := testsupport.SoftRoCEHost(t)
	cfg := &Config{Provider: ProviderRDMACore}
	lc := ListenConfig{Config: cfg}
	l, err := lc.Listen(context.Background(), "rdma", net.JoinHostPort(ip, "0"))
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	connect := func() (c, s *Conn) {
		cc, sc := testsupport.Connect(t, l, dialer(l, cfg))
		c, s = cc.(*Conn), sc.(*Conn)
		require.Equal(t, ProviderRDMACore, c.Provider())
		return c, s
	}
	c, s := connect()
	target := allocBuffer(t, 4<<20)
	d, err := s.Expose(target, 0, 4<<20, AccessRead|AccessWrite)
	require.NoError(t, err)
	local := allocBuffer(t, 4<<20)
	for i := range local.Bytes() {
		local.Bytes()[i] = byte(i*5 + 3)
	}
	require.NoError(t, c.WriteRemote(d, 0, local.Bytes()[:2<<20]))
	require.NoError(t, c.WriteRemoteNotify(d, 2<<20, local.Bytes()[2<<20:], 77))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, n, err := s.WaitNotify(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint32(77), v)
	assert.Equal(t, 2<<20, n)
	assert.True(t, bytes.Equal(local.Bytes(), target.Bytes()), "the written bytes")
	back := allocBuffer(t, 4<<20)
	require.NoError(t, c.ReadRemote(d, 0, back.Bytes()))
	assert.True(t, bytes.Equal(target.Bytes(), back.Bytes()), "the read bytes")

	for name, forge := range map[string]func(d *Desc){
		"forged rkey":    func(d *Desc) { d[24] ^= 0x5a },
		"stretched":      func(d *Desc) { d[18]++ }, // +16 MiB of length
		"read not given": func(d *Desc) { d[5] = byte(AccessRead | AccessWrite) },
		"revoked":        nil,
	} {
		t.Run(name, func(t *testing.T) {
			ac, as := connect()
			secret := allocBuffer(t, 1<<20)
			fill(secret.Bytes(), 0xee)
			ed, err := as.Expose(secret, 0, 4096, AccessWrite)
			require.NoError(t, err)
			if forge == nil {
				require.NoError(t, as.Unexpose(ed))
			} else {
				forge(&ed)
			}
			mine := allocBuffer(t, 64<<10)
			if name == "read not given" {
				err = ac.ReadRemote(ed, 0, mine.Bytes()[:4096])
				assert.Equal(t, make([]byte, 4096), mine.Bytes()[:4096], "nothing was read")
			} else {
				fill(mine.Bytes(), 0x77)
				n := 4096
				if name == "stretched" {
					n = len(mine.Bytes()) // beyond the range, within the claim
				}
				err = ac.WriteRemote(ed, 0, mine.Bytes()[:n])
			}
			require.ErrorIs(t, err, ErrRemoteAccess)
			assert.Equal(t, -1, bytes.IndexByte(secret.Bytes()[4096:], 0x77), "nothing landed beyond the range")
			_, err = ac.Write([]byte("x"))
			require.Error(t, err, "the attacker's connection is broken")
			require.NoError(t, c.ReadRemote(d, 0, back.Bytes()[:4096]), "the honest peer goes on")
		})
	}
}

// BenchmarkRemoteRDMACore: 1 MiB WriteRemote and ReadRemote on rdmacore,
// from 1 and 4 goroutines (scripts/softroce-onesided-bench.sh runs it
// beside ib_write_bw and ib_read_bw in one guest run). Skipped outside the
// Soft-RoCE VM.
func BenchmarkRemoteRDMACore(b *testing.B) {
	ip := testsupport.SoftRoCEHost(b)
	cfg := &Config{Provider: ProviderRDMACore}
	lc := ListenConfig{Config: cfg}
	l, err := lc.Listen(context.Background(), "rdma", net.JoinHostPort(ip, "0"))
	require.NoError(b, err)
	b.Cleanup(func() { l.Close() })
	for _, op := range []string{"write", "read"} {
		for _, g := range []int{1, 4} {
			b.Run(fmt.Sprintf("%s/1024KiB/g%d", op, g), func(b *testing.B) {
				cc, sc := testsupport.Connect(b, l, dialer(l, cfg))
				benchRemote(b, cc.(*Conn), sc.(*Conn), op, 1<<20, g)
			})
		}
	}
}
