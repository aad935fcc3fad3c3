//go:build linux

package collectives

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Setting up the same-host segment, after the conns are built:
//
//  1. Every rank computes its host identity (boot ID, network namespace,
//     effective uid) and the ranks all-gather them over the conns. Only if
//     all are equal (and the group is at most shmMaxRanks) is a segment
//     tried; the identities are a hint, nothing is trusted from them.
//  2. Rank 0 creates the segment: a memfd of mode 0600 whose size is sealed
//     (it cannot shrink under a mapping and turn accesses into SIGBUS), of
//     the size every rank computes from the group size.
//  3. Every other rank listens on an abstract unix socket whose name it
//     derives from its own conn to rank 0 (that conn's two addresses, as
//     its kernel reports them: unique on the host while the conn lives).
//     Rank 0 derives the same name from its side of the conn and dials it;
//     no name is ever read from a peer. Abstract sockets live in a network
//     namespace, so ranks in different namespaces cannot meet this way.
//  4. Both ends check the other process runs as their effective uid
//     (SO_PEERCRED); rank 0 passes the memfd (SCM_RIGHTS) with the table of
//     the ranks' process ids (each taken from SO_PEERCRED, the kernel's
//     word); the receiver checks the descriptor is a sealed memfd of mode
//     0600 of exactly the size it computed, and that the table's rank 0 is
//     the process it talks to, before mapping it.
//  5. Every rank opens a pidfd for each other process of the group, by which
//     a waiting rank learns that a peer died.
//  6. The ranks agree (an all-reduce of their outcome over the conns): the
//     group uses the segment only if every rank has it, else every rank
//     drops it and the group runs over its conns as before.
//
// Every step that waits on a peer has a deadline: shmSetupTimeout, or
// ctx's if sooner.

const shmSetupTimeout = 5 * time.Second

// AlgoEnv picks the engine: "auto" (or unset) uses the same-host segment
// where every rank is on one host, "stream" always the conns, "shm"
// requires the segment (Join fails without it).
const AlgoEnv = "RDMA_COLL_ALGO"

// shmMode reads AlgoEnv.
func shmMode() (string, error) {
	switch v := os.Getenv(AlgoEnv); v {
	case "", "auto":
		return "auto", nil
	case "stream", "shm":
		return v, nil
	default:
		return "", fmt.Errorf("%s=%q: want auto, stream or shm", AlgoEnv, v)
	}
}

// idLen is a rank's identity record at Join: its host identity, then
// the first 8 bytes of its kernel's (kernelIdentity).
const idLen = 32 + 8

// kernelIdentity is a digest of this kernel's boot: the same in every
// network namespace and container on the machine. Zero if unknown.
func kernelIdentity() [32]byte {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return [32]byte{}
	}
	return sha256.Sum256(boot)
}

// hostIdentity is a digest of this process's boot, network namespace and
// effective uid, or zero where shared memory is not possible.
func hostIdentity() [32]byte {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return [32]byte{}
	}
	netns, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return [32]byte{}
	}
	return sha256.Sum256(fmt.Appendf(nil, "%s|%s|%d", boot, netns, os.Geteuid()))
}

// setupShm attaches the group to a same-host segment if every rank can;
// see above. An error means the group itself failed (it is broken).
func setupShm(ctx context.Context, g *Group, conns []net.Conn) error {
	mode, err := shmMode()
	if err != nil {
		return err
	}
	return attachShm(ctx, g, conns, mode)
}

// attachShm is setupShm in mode ("auto", "stream" or "shm").
func attachShm(ctx context.Context, g *Group, conns []net.Conn, mode string) error {
	var id [32]byte
	if mode != "stream" && g.size <= shmMaxRanks {
		id = hostIdentity()
	}
	return attachShmAs(ctx, g, conns, mode, id)
}

// attachShmAs is attachShm with this rank's host identity id (zero: no
// segment for this rank). A group whose ranks are all on one host gets one
// segment; in mode "auto" a group spread over hosts gets one per host
// with two ranks or more, and runs AllReduce hierarchically (hier.go).
func attachShmAs(ctx context.Context, g *Group, conns []net.Conn, mode string, id [32]byte) error {
	n := g.size
	if n < 2 {
		return nil // nothing to share; the operations are copies
	}
	// Each rank's host identity, and a digest of its kernel's boot: ranks
	// on one kernel share its CPUs even when they are on different hosts
	// to the group (network namespaces, containers).
	var mine [idLen]byte
	copy(mine[:], id[:])
	if id != ([32]byte{}) {
		kernel := kernelIdentity()
		copy(mine[32:], kernel[:])
	}
	all := make([]byte, idLen*n)
	if err := g.AllGather(ctx, mine[:], all); err != nil {
		return err
	}
	ids := make([]byte, 32*n)
	onKernel := 0 // ranks on this kernel, this one included
	for r := range n {
		copy(ids[32*r:], all[idLen*r:])
		if id != ([32]byte{}) && string(all[idLen*r+32:idLen*(r+1)]) == string(mine[32:]) {
			onKernel++
		}
	}
	var team *shmTeam
	var setupErr error
	var hosts [][32]byte // each rank's host, when spread over hosts
	switch {
	case id == [32]byte{}:
		setupErr = errors.New("the ranks are not all on this host as this user")
	case allEqual(ids, 32):
		sctx, cancel := context.WithTimeout(ctx, shmSetupTimeout)
		team, setupErr = buildTeam(sctx, g.rank, n, conns)
		cancel()
	case mode == "auto":
		hosts = make([][32]byte, n)
		var local []int // this host's ranks, ascending
		for r := range hosts {
			copy(hosts[r][:], ids[32*r:])
			if hosts[r] == id {
				local = append(local, r)
			}
		}
		if len(local) == 1 && !sharesHost(hosts) {
			hosts = nil // one rank a host: nothing to share
			break
		}
		if len(local) > 1 {
			localConns := make([]net.Conn, len(local))
			me := 0
			for i, r := range local {
				localConns[i] = conns[r]
				if r == g.rank {
					me = i
				}
			}
			sctx, cancel := context.WithTimeout(ctx, shmSetupTimeout)
			team, setupErr = buildTeam(sctx, me, len(local), localConns)
			cancel()
			if team != nil {
				team.ranks, team.groupSize = local, n
				team.spin, team.spreads = cpuPolicy(onKernel)
			}
		}
	default:
		setupErr = errors.New("the ranks are not all on this host as this user")
	}
	ok := []int32{0}
	if team != nil || (hosts != nil && setupErr == nil) {
		ok[0] = 1
	}
	if err := AllReduce(ctx, g, ok, ok, Min); err != nil {
		if team != nil {
			team.free()
		}
		return err
	}
	if ok[0] == 0 {
		if team != nil {
			team.free()
		}
		if mode == "shm" {
			if setupErr == nil {
				setupErr = errors.New("another rank could not map it")
			}
			return fmt.Errorf("%s=shm: no shared segment: %w", AlgoEnv, setupErr)
		}
		return nil
	}
	if hosts != nil {
		h := newHierarchy(hosts, g.rank, team)
		split := []int32{h.canSplit()}
		if err := AllReduce(ctx, g, split, split, Min); err != nil {
			if team != nil {
				team.free()
			}
			return err
		}
		h.split = split[0] == 1
		g.hier = h
		return nil
	}
	g.shm = team
	// Every rank published where it mapped the segment before the
	// agreement above: each tries to read the others' memory, and large
	// operations copy once only if every rank can (AllReduce only if
	// every rank also has a CPU of its own).
	votes := []int32{team.probeSingleCopy(), 0}
	if team.spreads {
		votes[1] = 1
	}
	if err := AllReduce(ctx, g, votes, votes, Min); err != nil {
		return err
	}
	team.single = votes[0] == 1
	team.singleReduce = team.single && votes[1] == 1
	team.eager = votes[1] == 0
	return nil
}

// sharesHost says whether two ranks are on one host.
func sharesHost(hosts [][32]byte) bool {
	seen := make(map[[32]byte]bool, len(hosts))
	for _, h := range hosts {
		if seen[h] {
			return true
		}
		seen[h] = true
	}
	return false
}

func allEqual(b []byte, w int) bool {
	for i := w; i < len(b); i += w {
		if string(b[i:i+w]) != string(b[:w]) {
			return false
		}
	}
	return true
}

// shmSocketName is the abstract socket on which a rank other than 0 waits
// for rank 0's segment: derived from the conn between them, rank 0's end
// first, by each side from its own view of the conn.
func shmSocketName(rank0, member net.Addr) (string, error) {
	norm := func(a net.Addr) (string, error) {
		ap, err := netip.ParseAddrPort(a.String())
		if err != nil {
			return "", fmt.Errorf("address %v: %w", a, err)
		}
		return netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port()).String(), nil
	}
	a, err := norm(rank0)
	if err != nil {
		return "", err
	}
	b, err := norm(member)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(a + "/" + b))
	return fmt.Sprintf("@rdma-coll/%x", sum[:16]), nil
}

// shmHello is rank 0's message with the memfd: magic, group size, segment
// size, then the process id of every rank.
func shmHelloLen(n int) int { return 24 + 8*n }

// buildTeam runs steps 2 to 5 on this rank.
func buildTeam(ctx context.Context, rank, n int, conns []net.Conn) (*shmTeam, error) {
	lay := layoutFor(n)
	deadline, _ := ctx.Deadline()
	if rank != 0 {
		c := conns[0]
		name, err := shmSocketName(c.RemoteAddr(), c.LocalAddr())
		if err != nil {
			return nil, err
		}
		return receiveSegment(ctx, name, rank, n, lay, deadline)
	}
	fd, seg, err := createSegment(lay.size)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	ok := false
	defer func() {
		if !ok {
			_ = unix.Munmap(seg)
		}
	}()
	socks := make([]*net.UnixConn, n)
	defer func() {
		for _, s := range socks {
			if s != nil {
				s.Close()
			}
		}
	}()
	pids := make([]int, n)
	pids[0] = os.Getpid()
	for r := 1; r < n; r++ {
		c := conns[r]
		name, err := shmSocketName(c.LocalAddr(), c.RemoteAddr())
		if err != nil {
			return nil, err
		}
		if socks[r], pids[r], err = dialMember(ctx, name, deadline); err != nil {
			return nil, fmt.Errorf("rank %d: %w", r, err)
		}
	}
	hello := make([]byte, shmHelloLen(n))
	binary.LittleEndian.PutUint64(hello[0:], shmMagic)
	binary.LittleEndian.PutUint64(hello[8:], uint64(n))
	binary.LittleEndian.PutUint64(hello[16:], uint64(lay.size))
	for r, p := range pids {
		binary.LittleEndian.PutUint64(hello[24+8*r:], uint64(p))
	}
	for r := 1; r < n; r++ {
		if _, _, err := socks[r].WriteMsgUnix(hello, unix.UnixRights(fd), nil); err != nil {
			return nil, fmt.Errorf("rank %d: passing the segment: %w", r, err)
		}
	}
	// Wait for every rank's word that it mapped the segment, so that no
	// rank starts before the others can see it.
	for r := 1; r < n; r++ {
		var b [1]byte
		if _, err := socks[r].Read(b[:]); err != nil || b[0] != 1 {
			return nil, fmt.Errorf("rank %d did not map the segment: %v", r, err)
		}
	}
	live, err := openLiveness(pids, 0)
	if err != nil {
		return nil, err
	}
	ok = true
	return teamOver(seg, n, 0, live), nil
}

func teamOver(seg []byte, n, me int, live *shmLiveness) *shmTeam {
	t := newShmTeam(seg, n, me)
	t.live = live
	t.ctrl[me].base.Store(uint64(uintptr(unsafe.Pointer(unsafe.SliceData(seg)))))
	for q := range n {
		t.sleeps[q] = live.of[q] >= 0 // another process
	}
	t.free = func() {
		_ = unix.Munmap(seg)
		live.close()
	}
	return t
}

// createSegment makes a sealed memfd of size bytes, mode 0600, mapped.
func createSegment(size int) (int, []byte, error) {
	fd, err := unix.MemfdCreate("rdma-collectives", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, nil, err
	}
	// A memfd's inode is created mode 0777: whoever holds a descriptor could
	// reopen it through /proc/PID/fd. Only this user's processes may.
	if err := unix.Fchmod(fd, 0o600); err == nil {
		err = unix.Ftruncate(fd, int64(size))
		if err == nil {
			_, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL)
		}
		if err == nil {
			var seg []byte
			if seg, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err == nil {
				binary.LittleEndian.PutUint64(seg, shmMagic)
				return fd, seg, nil
			}
		}
	}
	unix.Close(fd)
	return -1, nil, err
}

// dialMember connects to a member's socket, retrying until it listens, and
// returns the conn and the member's process id once it runs as our uid.
func dialMember(ctx context.Context, name string, deadline time.Time) (*net.UnixConn, int, error) {
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "unix", name)
		if err == nil {
			uc := c.(*net.UnixConn)
			pid, err := peerProcess(uc)
			if err != nil {
				uc.Close()
				return nil, 0, err
			}
			_ = uc.SetDeadline(deadline)
			return uc, pid, nil
		}
		select {
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("no listener at %s: %w", name, err)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// peerProcess returns the pid of the process at the other end of uc if it
// runs as our effective uid.
func peerProcess(uc *net.UnixConn) (int, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	if int(cred.Uid) != os.Geteuid() {
		return 0, fmt.Errorf("the process at the other end runs as uid %d, not %d", cred.Uid, os.Geteuid())
	}
	return int(cred.Pid), nil
}

// receiveSegment is a member's side: listen at name, take rank 0's conn,
// check it, receive and check the memfd, map it.
func receiveSegment(ctx context.Context, name string, rank, n int, lay shmLayout, deadline time.Time) (*shmTeam, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "unix", name)
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	ul := ln.(*net.UnixListener)
	_ = ul.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = ul.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	uc, err := ul.AcceptUnix()
	if err != nil {
		return nil, err
	}
	defer uc.Close()
	_ = uc.SetDeadline(deadline)
	pid0, err := peerProcess(uc)
	if err != nil {
		return nil, err
	}
	hello := make([]byte, shmHelloLen(n))
	fd, err := recvFD(uc, hello)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	pids, err := parseShmHello(hello, n, lay.size, rank, pid0, os.Getpid())
	if err != nil {
		return nil, err
	}
	seg, err := mapSegment(fd, lay.size)
	if err != nil {
		return nil, err
	}
	live, err := openLiveness(pids, rank)
	if err != nil {
		_ = unix.Munmap(seg)
		return nil, err
	}
	if _, err := uc.Write([]byte{1}); err != nil {
		_ = unix.Munmap(seg)
		live.close()
		return nil, err
	}
	return teamOver(seg, n, rank, live), nil
}

// pidMax bounds a process id (the kernel's PID_MAX_LIMIT).
const pidMax = 1 << 22

// parseShmHello checks rank 0's hello (shmHelloLen(n) bytes) against what
// this rank computed and saw: the group size n, the segment size, rank 0's
// process id pid0 (SO_PEERCRED) and its own, self, at rank; it returns the
// table of process ids.
func parseShmHello(hello []byte, n, size, rank, pid0, self int) ([]int, error) {
	if len(hello) != shmHelloLen(n) {
		return nil, fmt.Errorf("a hello of %d bytes, want %d", len(hello), shmHelloLen(n))
	}
	if binary.LittleEndian.Uint64(hello[0:]) != shmMagic || binary.LittleEndian.Uint64(hello[8:]) != uint64(n) ||
		binary.LittleEndian.Uint64(hello[16:]) != uint64(size) {
		return nil, errors.New("rank 0's segment is not of this group's layout")
	}
	pids := make([]int, n)
	for r := range pids {
		p := binary.LittleEndian.Uint64(hello[24+8*r:])
		if p == 0 || p > pidMax {
			return nil, fmt.Errorf("rank %d's process id %d", r, p)
		}
		pids[r] = int(p)
	}
	if pids[0] != pid0 || pids[rank] != self {
		return nil, errors.New("rank 0's process table does not match the processes")
	}
	return pids, nil
}

// recvFD reads one message of exactly len(b) bytes carrying exactly one
// descriptor. On error no descriptor stays open.
func recvFD(uc *net.UnixConn, b []byte) (int, error) {
	buf := make([]byte, len(b)+1)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, flags, _, err := uc.ReadMsgUnix(buf, oob)
	var fds []int
	if oobn > 0 {
		if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
			for i := range msgs {
				if f, err := unix.ParseUnixRights(&msgs[i]); err == nil {
					fds = append(fds, f...)
				}
			}
		}
	}
	if err == nil && (n != len(b) || len(fds) != 1 || flags&(unix.MSG_CTRUNC|unix.MSG_TRUNC) != 0) {
		err = errors.New("malformed segment message")
	}
	if err != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return -1, err
	}
	copy(b, buf)
	return fds[0], nil
}

// mapSegment maps the memfd rank 0 passed after checking it cannot shrink,
// is a regular file only our user can reopen, and has exactly size bytes.
func mapSegment(fd, size int) ([]byte, error) {
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&unix.F_SEAL_SHRINK == 0 {
		return nil, errors.New("rank 0's segment is not sealed against shrinking")
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Mode&0o077 != 0 ||
		st.Size != int64(size) {
		return nil, errors.New("rank 0's segment is not a private file of the expected size")
	}
	seg, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, err
	}
	if binary.LittleEndian.Uint64(seg) != shmMagic {
		_ = unix.Munmap(seg)
		return nil, errors.New("rank 0's segment has no header")
	}
	return seg, nil
}

// shmLiveness watches the group's other processes through pidfds.
type shmLiveness struct {
	fds  []unix.PollFd
	of   []int // of[rank]: the index in fds of rank's process, or -1 (ours)
	pids []int // pids[rank]: its process
}

// pid is rank's process id. While dead(rank) is false after a use of it,
// the id was rank's process during that use (its pidfd keeps it from
// being given to another process before this one saw it exit).
func (l *shmLiveness) pid(rank int) int { return l.pids[rank] }

// openLiveness opens a pidfd for every process of pids but ours (ranks of
// one process share it).
func openLiveness(pids []int, me int) (*shmLiveness, error) {
	l := &shmLiveness{of: make([]int, len(pids)), pids: pids}
	index := map[int]int{pids[me]: -1}
	for r, p := range pids {
		if i, ok := index[p]; ok {
			l.of[r] = i
			continue
		}
		fd, err := unix.PidfdOpen(p, 0)
		if err != nil {
			l.close()
			return nil, fmt.Errorf("rank %d's process %d: %w", r, p, err)
		}
		index[p] = len(l.fds)
		l.of[r] = len(l.fds)
		l.fds = append(l.fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
	}
	return l, nil
}

// dead reports whether rank's process has exited (its pidfd is readable).
func (l *shmLiveness) dead(rank int) bool {
	if l == nil || l.of[rank] < 0 {
		return false
	}
	i := l.of[rank]
	n, err := unix.Poll(l.fds[i:i+1], 0)
	return err == nil && n > 0 && l.fds[i].Revents != 0
}

func (l *shmLiveness) close() {
	if l == nil {
		return
	}
	for _, p := range l.fds {
		unix.Close(int(p.Fd))
	}
	l.fds = nil
}

// The futex operations (linux/futex.h): shared, not FUTEX_PRIVATE_FLAG.
const (
	futexWaitOp = 0
	futexWakeOp = 1
)

// futexWait sleeps until word's low half is no longer val, a futexWake on
// word, or d. The futex is shared (keyed by the segment's file and
// offset), so that the ranks' processes meet on it.
func futexWait(word *atomic.Uint64, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(word)), futexWaitOp, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWake wakes every rank asleep on word.
func futexWake(word *atomic.Uint64) {
	_, _, _ = unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(word)), futexWakeOp, math.MaxInt32, 0, 0, 0)
}

// readPeer copies len(dst) bytes at addr in process pid's memory into dst
// (process_vm_readv: allowed for a process of the same user, as the
// group's are). A bad address fails (EFAULT) without touching dst
// beyond what was read.
func readPeer(pid int, dst []byte, addr uint64) error {
	return peerIO(unix.SYS_PROCESS_VM_READV, pid, dst, addr)
}

// writePeer copies src into process pid's memory at addr
// (process_vm_writev), as readPeer reads. A bad address fails (EFAULT).
func writePeer(pid int, src []byte, addr uint64) error {
	return peerIO(unix.SYS_PROCESS_VM_WRITEV, pid, src, addr)
}

// peerIO moves buf from or to pid's memory at addr with the system call
// nr (process_vm_readv or process_vm_writev), all of it or an error.
func peerIO(nr uintptr, pid int, buf []byte, addr uint64) error {
	if len(buf) == 0 {
		return nil
	}
	local := unix.Iovec{Base: unsafe.SliceData(buf), Len: uint64(len(buf))}
	remote := unix.RemoteIovec{Base: uintptr(addr), Len: len(buf)}
	n, _, e := unix.Syscall6(nr, uintptr(pid), uintptr(unsafe.Pointer(&local)), 1,
		uintptr(unsafe.Pointer(&remote)), 1, 0)
	switch {
	case e != 0:
		return e
	case int(n) != len(buf):
		return fmt.Errorf("moved %d of %d bytes", n, len(buf))
	}
	return nil
}

// currentCPU is the CPU this thread runs on.
func currentCPU() (uint32, bool) {
	var cpu uint32
	_, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0)
	return cpu, e == 0
}

// moveOffCPU moves the calling thread from CPU from to another CPU it may
// run on, if there is one, and leaves its affinity as it was: the kernel
// migrates a thread at once when its CPU leaves its mask, and then lets it
// stay. It returns the CPU the thread ran on while from was excluded.
func moveOffCPU() (from, to uint32, moved bool) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	from, ok := currentCPU()
	var mask unix.CPUSet
	if !ok || unix.SchedGetaffinity(0, &mask) != nil || mask.Count() < 2 || !mask.IsSet(int(from)) {
		return from, from, false
	}
	others := mask
	others.Clear(int(from))
	if unix.SchedSetaffinity(0, &others) != nil {
		return from, from, false
	}
	to, _ = currentCPU()
	_ = unix.SchedSetaffinity(0, &mask)
	return from, to, true
}

// osYield gives the CPU to another thread: a waiting rank may share its
// core with the rank it waits for.
func osYield() { _, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
