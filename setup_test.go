package rdma

import (
	"io"
	"net"
	"os"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/rdmanet/rdma/internal/testsupport"
	"github.com/rdmanet/rdma/verbs"
)

// residentPages counts the pages of b that are in memory.
func residentPages(t *testing.T, b []byte) int {
	t.Helper()
	page := os.Getpagesize()
	vec := make([]byte, (len(b)+page-1)/page)
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0])))
	require.Zero(t, errno, "mincore")
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// A connection's first small writes and the peer's first writes into its
// ring touch one page of its memory block between them: the send buffer's
// last half page and the ring's first half page are one page, where its
// send positions start. On soft, which leaves the block's pages alone
// until they are used, a connection that exchanged small messages holds
// one page of it, not two; every page a setup touches for the first time
// is a page fault on its path.
func TestFirstWritesShareAPage(t *testing.T) {
	softTransports(t, func(t *testing.T, _ []string) {
		ln := listen(t, nil)
		c, s := testsupport.Connect(t, ln, dialer(ln, softConfig()))
		msg := make([]byte, 100)
		for i := range 3 {
			_, err := c.Write(msg)
			require.NoError(t, err)
			_, err = io.ReadFull(s, msg)
			require.NoError(t, err, "round %d", i)
			_, err = s.Write(msg)
			require.NoError(t, err)
			_, err = io.ReadFull(c, msg)
			require.NoError(t, err)
		}
		for _, conn := range []net.Conn{c, s} {
			e := &conn.(*Conn).endpoint
			assert.Equal(t, 1, residentPages(t, e.mem.Bytes()), "resident pages of a memory block")
			page := uint64(os.Getpagesize())
			assert.Equal(t, verbs.AddrOf(e.ring)/page, (verbs.AddrOf(e.sbuf)+sendStart(len(e.sbuf)))/page,
				"the ring's start and the first send position are one page")
		}
		// A write larger than what is left before the send buffer's end
		// starts at its beginning, and arrives whole.
		big := make([]byte, 3*os.Getpagesize())
		for i := range big {
			big[i] = byte(i)
		}
		go func() { _, _ = c.Write(big) }()
		got := make([]byte, len(big))
		_, err := io.ReadFull(s, got)
		require.NoError(t, err)
		assert.Equal(t, big, got)
	})
}
