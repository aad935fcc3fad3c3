//go:build linux

package soft

import (
	"bytes"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Ring layout: one header page of control words, each on its own cache
// line, then the data area (a power of two). The producer owns tail and
// wclosed, the consumer head; rwait is set by a consumer about to sleep and
// cleared by whichever side wakes it, wwait likewise for a producer waiting
// for space. Positions are byte counts since the start, never wrapped.
//
// The data area holds records, 8-byte aligned, never wrapped around the
// end: an 8-byte header (kind uint32, length uint32) then
//
//	recData   length stream bytes (padded to 8)
//	recPad    length bytes to skip: the rest of the data area
//
// rgen is the consumer's: 0, or, when its wake-ups go through a doorbell
// that other rings share (shm_doorbell_linux.go), the doorbell's arming
// that set rwait last, which tells a producer whether another ring's
// producer already signalled for it.
//
// The producer publishes tail only at record boundaries. Everything read
// from the ring or the header page is checked: the peer can write to them.
// Only stream bytes ever enter a ring: payloads are copied in by the
// sender and out by the receiver, so no other memory of either process is
// shared.
const (
	shmHdrPage = 4096
	shmMagic   = 0x33_4d_48_53_54_46_4f_53 // "SOFTSHM3": one eventfd per side
	offMagic   = 0
	offTail    = 64
	offWClosed = 72
	offHead    = 128
	offRWait   = 192
	offRGen    = 200 // on rwait's line: an arming writes both
	offWWait   = 256

	recData = 1
	recPad  = 3
	recHdr  = 8

	// shmSetupTimeout bounds the ring exchange on the unix socket.
	shmSetupTimeout = 2 * time.Second
	shmAckEvery     = 4
)

var errShmSetup = errors.New("soft: shared-memory setup failed")

func au64(b []byte, off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&b[off])) }
func au32(b []byte, off int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&b[off])) }

// bootID identifies this boot of this host: two processes with the same
// boot ID share a kernel.
var bootID = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	s := string(bytes.TrimSpace(b))
	if len(s) != bootIDLen {
		return ""
	}
	return s
})

// shmRing is a view of one ring mapping.
type shmRing struct {
	mem     []byte
	data    []byte
	mask    uint64
	tail    *atomic.Uint64
	head    *atomic.Uint64
	wclosed *atomic.Uint32
	rwait   *atomic.Uint32
	wwait   *atomic.Uint32
	rgen    *atomic.Uint64
}

func viewRing(mem []byte) shmRing {
	return shmRing{mem: mem, data: mem[shmHdrPage:], mask: uint64(len(mem) - shmHdrPage - 1),
		tail: au64(mem, offTail), head: au64(mem, offHead), wclosed: au32(mem, offWClosed),
		rwait: au32(mem, offRWait), wwait: au32(mem, offWWait), rgen: au64(mem, offRGen)}
}

// shmLocal is what one side creates and passes to its peer: the ring it
// reads (the peer writes it) and the eventfd it waits on, which the peer
// signals both when it put data in our ring and when it freed space in its
// own. One eventfd per side, not one per condition: a connection holds
// three descriptors (its own eventfd, the peer's, the handshake's TCP
// connection), and the ring's memfd is closed once mapped. From the second
// connection to a peer process on, the eventfd is that process's doorbell,
// which the connections share (shm_doorbell_linux.go): two descriptors.
type shmLocal struct {
	ring   []byte
	ringFD int
	ev     int // -1 when gathered
	// bell counts this connection as one to its peer process
	// (joinDoorbell; nil: not counted); gathered: its wake-ups come
	// through the bell's eventfd, not ev.
	bell     *shmDoorbell
	gathered bool
}

// eventFD is the eventfd the peer is to signal: ours, or the doorbell's.
func (l *shmLocal) eventFD() int {
	if l.gathered {
		return l.bell.fd
	}
	return l.ev
}

// newShmLocal creates a ring of size data bytes (a power of two).
func newShmLocal(size int) (*shmLocal, error) {
	l := &shmLocal{ringFD: -1, ev: -1}
	fail := func(err error) (*shmLocal, error) { l.free(); return nil, err }
	fd, err := unix.MemfdCreate("rdma-soft-ring", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return fail(err)
	}
	l.ringFD = fd
	// A memfd's inode is created mode 0777: whoever holds a descriptor of
	// it could reopen it through /proc/PID/fd whatever the descriptor's
	// own mode. Only this user's processes may.
	if err := unix.Fchmod(fd, 0o600); err != nil {
		return fail(err)
	}
	if err := unix.Ftruncate(fd, int64(shmHdrPage+size)); err != nil {
		return fail(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		return fail(err)
	}
	if l.ring, err = unix.Mmap(fd, 0, shmHdrPage+size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return fail(err)
	}
	au64(l.ring, offMagic).Store(shmMagic)
	if l.ev, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		return fail(err)
	}
	return l, nil
}

func (l *shmLocal) free() {
	if l == nil {
		return
	}
	if l.ring != nil {
		_ = unix.Munmap(l.ring)
		l.ring = nil
	}
	for _, fd := range []*int{&l.ringFD, &l.ev} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
	if l.bell != nil {
		l.bell.release(l.gathered)
		l.bell, l.gathered = nil, false
	}
}

// shmPeer is what the peer passed: the ring we write and its eventfd.
type shmPeer struct {
	ring []byte
	ev   int
}

func (p *shmPeer) free() {
	if p == nil {
		return
	}
	if p.ring != nil {
		_ = unix.Munmap(p.ring)
		p.ring = nil
	}
	if p.ev >= 0 {
		unix.Close(p.ev)
		p.ev = -1
	}
}

// mapRing maps a ring memfd the peer passed, of size bytes (checked against
// our limit already), after checking that it cannot shrink under us (which
// would turn our accesses into SIGBUS) and that no other user can open it.
func mapRing(fd int, size int) ([]byte, error) {
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&unix.F_SEAL_SHRINK == 0 {
		return nil, errShmSetup
	}
	// Only our user may reopen it (what we write there is for the peer).
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Mode&0o077 != 0 ||
		st.Size < int64(size) {
		return nil, errShmSetup
	}
	// Not populated: pages are committed as the ring is first written, so
	// a connection that carries little costs little (measured: no
	// difference in a 64 KiB stream against MAP_POPULATE).
	return unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}
