package rdma

import (
	"context"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/testsupport"
)

// On rdmacore (the Soft-RoCE VM; it skips elsewhere) a busy-polling conn
// never sleeps on its completion channel, and still honours deadlines and
// Close. internal/conntest runs the whole suite busy-polling too.
func TestBusyPollRDMACore(t *testing.T) {
	ip := testsupport.SoftRoCEHost(t)
	cfg := &Config{Provider: ProviderRDMACore, BusyPoll: true}
	lc := ListenConfig{Config: cfg}
	l, err := lc.Listen(context.Background(), "rdma", net.JoinHostPort(ip, "0"))
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	cc, sc := testsupport.Connect(t, l, dialer(l, cfg))
	c, s := cc.(*Conn), sc.(*Conn)
	go io.Copy(s, s)

	want := make([]byte, 64)
	got := make([]byte, 64)
	for i := 0; i < 200; i++ {
		want[0] = byte(i)
		_, err := c.Write(want)
		require.NoError(t, err)
		_, err = io.ReadFull(c, got)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	c.c.Core.Mu.Lock()
	assert.True(t, c.c.Core.Poll.Busy)
	assert.Zero(t, c.c.Core.Poll.Sleeps, "a busy-polling conn slept on its channel")
	c.c.Core.Mu.Unlock()

	require.NoError(t, c.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
	_, err = c.Read(got)
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.NoError(t, c.SetReadDeadline(time.Time{}))

	done := make(chan error, 1)
	go func() {
		_, err := c.Read(got)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, c.Close())
	assert.ErrorIs(t, <-done, net.ErrClosed)
}
