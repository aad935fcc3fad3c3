//go:build linux

package soft_test

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/rdmanet/rdma/verbs"
	"github.com/rdmanet/rdma/verbs/soft"
)

// The tests in this file play a hostile peer in a child process (a re-exec
// of the test binary), as root like the test or as another uid (nobody),
// and check that it reaches nothing it was not granted.

const (
	hostileArg = "SOFT_TEST_HOSTILE_ARG"
	nobody     = 65534
)

// The child roles, by name; each returns the child's exit status.
var hostileRoles = map[string]func(arg string) int{
	"snoop": snoopChild,
	"hold":  holdChild,
	"name":  nameChild,
}

func init() {
	hostileChild = func(role string) {
		if f := hostileRoles[role]; f != nil {
			os.Exit(f(os.Getenv(hostileArg)))
		}
		os.Exit(99)
	}
}

// startChild starts the test binary as a child in role, as uid (0 keeps
// root), with its stdin and stdout piped. As another uid the binary is
// first copied where that uid may run it (go test's build directory is
// private to root).
func startChild(t *testing.T, role, arg string, uid int) (*exec.Cmd, io.WriteCloser, *bufio.Reader) {
	t.Helper()
	bin := os.Args[0]
	if uid != 0 {
		dir, err := os.MkdirTemp("", "soft-hostile-")
		require.NoError(t, err)
		t.Cleanup(func() { os.RemoveAll(dir) })
		require.NoError(t, os.Chmod(dir, 0o755))
		src, err := os.ReadFile(bin)
		require.NoError(t, err)
		bin = filepath.Join(dir, "soft.test")
		require.NoError(t, os.WriteFile(bin, src, 0o755))
	}
	cmd := exec.Command(bin, "-test.run", "^$")
	cmd.Dir = "/"
	// Connections move to shared memory at once (not after 64 KiB), so
	// that the child holds the rings it could snoop on.
	cmd.Env = append(os.Environ(), hostileEnv+"="+role, hostileArg+"="+arg, "RDMA_SOFT_SHM_SWITCH=0")
	cmd.Stderr = os.Stderr
	if uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, in, bufio.NewReader(out)
}

func needRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("playing a peer of another uid needs root (as in CI)")
	}
}

// softEnds is one side of soft connections driven through the verbs API:
// pd, cq and qp are the latest connection's; close releases them all.
type softEnds struct {
	ch   verbs.EventChannel
	ids  []verbs.CMID
	pd   verbs.PD
	cq   verbs.CQ
	qp   verbs.QP
	objs []interface{ Destroy() error } // QPs and CQs, in creation order
	pds  []verbs.PD
}

func (e *softEnds) event(want verbs.CMEventType) (verbs.CMEvent, error) {
	ev, err := e.ch.GetEvent(time.Now().Add(10 * time.Second))
	if err != nil {
		return ev, err
	}
	if ev.Type != want {
		return ev, fmt.Errorf("CM event %v, want %v (status %d)", ev.Type, want, ev.Status)
	}
	return ev, nil
}

func (e *softEnds) makeQP(id verbs.CMID) error {
	var err error
	ctx := id.Context()
	if e.pd, err = ctx.AllocPD(); err != nil {
		return err
	}
	e.pds = append(e.pds, e.pd)
	if e.cq, err = ctx.CreateCQ(16, nil); err != nil {
		return err
	}
	e.objs = append(e.objs, e.cq)
	if e.qp, err = id.CreateQP(e.pd, &verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return err
	}
	e.objs = append(e.objs, e.qp)
	return nil
}

// complete waits for one completion and checks that it succeeded.
func (e *softEnds) complete() error {
	wc := make([]verbs.WC, 1)
	end := time.Now().Add(10 * time.Second)
	for time.Now().Before(end) {
		n, err := e.cq.Poll(wc)
		if err != nil {
			return err
		}
		if n == 1 {
			if wc[0].Status != verbs.WCSuccess {
				return fmt.Errorf("completion status %v", wc[0].Status)
			}
			return nil
		}
		time.Sleep(time.Millisecond)
	}
	return fmt.Errorf("no completion")
}

func (e *softEnds) close() {
	for i := len(e.ids) - 1; i >= 0; i-- {
		_ = e.ids[i].Disconnect()
	}
	for i := len(e.objs) - 1; i >= 0; i-- {
		_ = e.objs[i].Destroy()
	}
	for _, pd := range e.pds {
		_ = pd.Dealloc()
	}
	for i := len(e.ids) - 1; i >= 0; i-- {
		_ = e.ids[i].Destroy()
	}
	if e.ch != nil {
		_ = e.ch.Close()
	}
}

// dialSoft connects to addr as an ordinary soft client.
func dialSoft(addr string) (*softEnds, error) { return dialSoftFrom(nil, addr) }

// dialSoftFrom connects from the source address src (nil: the route's).
func dialSoftFrom(src net.IP, addr string) (*softEnds, error) {
	p, err := verbs.Lookup("soft")
	if err != nil {
		return nil, err
	}
	e := &softEnds{}
	if e.ch, err = p.CreateEventChannel(); err != nil {
		return nil, err
	}
	id, err := e.ch.CreateID()
	if err != nil {
		return e, err
	}
	e.ids = append(e.ids, id)
	dst, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return e, err
	}
	var from *net.TCPAddr
	if src != nil {
		from = &net.TCPAddr{IP: src}
	}
	if err := id.ResolveAddr(from, dst, 5*time.Second); err != nil {
		return e, err
	}
	if _, err := e.event(verbs.EventAddrResolved); err != nil {
		return e, err
	}
	if err := id.ResolveRoute(5 * time.Second); err != nil {
		return e, err
	}
	if _, err := e.event(verbs.EventRouteResolved); err != nil {
		return e, err
	}
	if err := e.makeQP(id); err != nil {
		return e, err
	}
	if err := id.Connect(&verbs.ConnParam{RetryCount: 7, RNRRetryCount: 7}); err != nil {
		return e, err
	}
	_, err = e.event(verbs.EventEstablished)
	return e, err
}

// listenSoft listens on ip; accept takes the next connection.
func listenSoft(t *testing.T, ip net.IP) (*softEnds, string) {
	p, err := verbs.Lookup("soft")
	require.NoError(t, err)
	e := &softEnds{}
	e.ch, err = p.CreateEventChannel()
	require.NoError(t, err)
	lid, err := e.ch.CreateID()
	require.NoError(t, err)
	e.ids = append(e.ids, lid)
	require.NoError(t, lid.BindAddr(&net.TCPAddr{IP: ip}))
	require.NoError(t, lid.Listen(4))
	return e, lid.LocalAddr().String()
}

func (e *softEnds) accept() error {
	ev, err := e.event(verbs.EventConnectRequest)
	if err != nil {
		return err
	}
	e.ids = append(e.ids, ev.ID)
	if err := e.makeQP(ev.ID); err != nil {
		return err
	}
	if err := ev.ID.Accept(&verbs.ConnParam{RetryCount: 7, RNRRetryCount: 7}); err != nil {
		return err
	}
	_, err = e.event(verbs.EventEstablished)
	return err
}

// snoopChild is an ordinary soft client that, once it has received one
// message, looks at every memfd it holds (what a peer may have passed it)
// for the secrets in arg, tries to reopen each read-write through
// /proc/self/fd and to write a marker into it, and reports what it reached
// on stdout. It scans again when stdin says so (the server has written its
// second secret by then).
func snoopChild(arg string) int {
	f := strings.Fields(arg) // addr secret1 secret2 marker size
	if len(f) != 5 {
		return 2
	}
	s1, _ := hex.DecodeString(f[1])
	s2, _ := hex.DecodeString(f[2])
	marker, _ := hex.DecodeString(f[3])
	size, _ := strconv.Atoi(f[4])
	mem, err := verbs.AllocMemory(size)
	if err != nil {
		fmt.Println("error", err)
		return 3
	}
	own := memfds() // ours: not from the peer
	ownIno := map[uint64]bool{}
	for _, m := range memfdMappings() {
		ownIno[m.ino] = true
	}
	report := func(what string, b []byte) {
		if bytes.Contains(b, s1) {
			fmt.Println("found secret1 in", what)
		}
		if bytes.Contains(b, s2) {
			fmt.Println("found secret2 in", what)
		}
	}
	e, err := dialSoft(f[0])
	if err != nil {
		fmt.Println("error", err)
		return 3
	}
	mr, err := e.pd.RegMR(mem.Bytes(), verbs.AccessLocalWrite)
	if err != nil {
		fmt.Println("error", err)
		return 3
	}
	if err := e.qp.PostRecv([]verbs.RecvWR{{SG: []verbs.SGE{verbs.SGEOf(mr, mem.Bytes())}}}); err != nil {
		fmt.Println("error", err)
		return 3
	}
	fmt.Println("connected")
	if err := e.complete(); err != nil {
		fmt.Println("error", err)
		return 3
	}
	scan := func() {
		for fd := range memfds() {
			if own[fd] {
				continue
			}
			var st unix.Stat_t
			if unix.Fstat(fd, &st) == nil && st.Mode&0o077 != 0 {
				fmt.Printf("mode fd %d %#o\n", fd, st.Mode&0o777)
			}
			report("fd "+strconv.Itoa(fd), readFD(fd))
			tryWrite("/proc/self/fd/"+strconv.Itoa(fd), marker)
		}
		for _, m := range memfdMappings() {
			if ownIno[m.ino] {
				continue
			}
			if st, err := os.Stat(m.file); err == nil && st.Mode().Perm()&0o077 != 0 {
				fmt.Printf("mode mapping %s %#o\n", m.file, st.Mode().Perm())
			}
			report("mapping "+m.file, m.read())
			tryWrite(m.file, marker)
		}
	}
	scan()
	fmt.Println("scanned")
	var line string
	_, _ = fmt.Scanln(&line)
	scan()
	fmt.Println("done")
	_ = mr.Dereg()
	e.close()
	return 0
}

// memfds lists this process's descriptors that are memfds.
func memfds() map[int]bool {
	m := map[int]bool{}
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, d := range ents {
		fd, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink("/proc/self/fd/" + d.Name()); err == nil && strings.HasPrefix(l, "/memfd:") {
			m[fd] = true
		}
	}
	return m
}

// tryWrite opens path read-write and writes marker at the start of every
// page, reporting whether it could.
func tryWrite(path string, marker []byte) {
	w, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(w)
	fmt.Println("reopened read-write", path)
	var st unix.Stat_t
	if unix.Fstat(w, &st) != nil {
		return
	}
	for off := int64(0); off+int64(len(marker)) <= st.Size; off += 4096 {
		_, _ = unix.Pwrite(w, marker, off)
	}
}

// memfdMapping is a memfd mapped into this process.
type memfdMapping struct {
	start, end uint64
	ino        uint64
	file       string // its /proc/self/map_files entry
}

// read returns the mapping's bytes (read through /proc/self/mem).
func (m memfdMapping) read() []byte {
	f, err := os.Open("/proc/self/mem")
	if err != nil {
		return nil
	}
	defer f.Close()
	b := make([]byte, min(m.end-m.start, 64<<20))
	n, _ := f.ReadAt(b, int64(m.start))
	return b[:n]
}

// memfdMappings lists the memfds mapped into this process.
func memfdMappings() []memfdMapping {
	raw, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil
	}
	var ms []memfdMapping
	for _, l := range strings.Split(string(raw), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || !strings.HasPrefix(f[5], "/memfd:") {
			continue
		}
		r := strings.SplitN(f[0], "-", 2)
		start, err1 := strconv.ParseUint(r[0], 16, 64)
		end, err2 := strconv.ParseUint(r[1], 16, 64)
		ino, err3 := strconv.ParseUint(f[4], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		ms = append(ms, memfdMapping{start: start, end: end, ino: ino, file: "/proc/self/map_files/" + f[0]})
	}
	return ms
}

// readFD reads the whole file behind fd (up to 64 MiB) without moving its offset.
func readFD(fd int) []byte {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Size <= 0 {
		return nil
	}
	b := make([]byte, min(st.Size, 64<<20))
	n, _ := unix.Pread(fd, b, 0)
	return b[:max(n, 0)]
}

func randomHex(t *testing.T, n int) ([]byte, string) {
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return b, hex.EncodeToString(b)
}

// A peer reaches only the bytes it was sent. The server sends 64 KiB from
// an MR in the middle of a block whose unregistered first part holds a
// secret, then deregisters the MR and writes a second secret where it
// was; the client, as root (the shared-memory path) and as nobody (which
// now gets TCP only, being another uid), looks through every memfd it was given for either
// secret and writes a marker into whatever it can open read-write. As on
// a NIC, it finds neither secret, the server's memory is untouched, and
// nothing it holds is open to other uids.
func TestPeerReachesOnlySentBytes(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		name string
		uid  int
	}{{"same uid", 0}, {"other uid", nobody}} {
		t.Run(tc.name, func(t *testing.T) {
			const size = 256 << 10
			s1, h1 := randomHex(t, 32)
			s2, h2 := randomHex(t, 32)
			marker, hm := randomHex(t, 16)
			srv, addr := listenSoft(t, net.IPv4(127, 0, 0, 1))
			defer srv.close()
			shmBefore := soft.ShmConnections()
			_, in, out := startChild(t, "snoop", fmt.Sprintf("%s %s %s %s %d", addr, h1, h2, hm, size), tc.uid)
			require.NoError(t, srv.accept())
			if tc.uid == 0 {
				for end := time.Now().Add(10 * time.Second); soft.ShmConnections() == shmBefore && time.Now().Before(end); {
					time.Sleep(time.Millisecond)
				}
				require.Equal(t, shmBefore+1, soft.ShmConnections(), "the same user gets shared memory")
			} else {
				require.Equal(t, shmBefore, soft.ShmConnections(), "another user gets TCP only")
			}
			mem, err := verbs.AllocMemory(size)
			require.NoError(t, err)
			defer mem.Free()
			block := mem.Bytes()
			copy(block, s1)                    // never registered
			payload := block[64<<10 : 128<<10] // registered, sent
			_, _ = rand.Read(payload)
			mr, err := srv.pd.RegMR(payload, 0) // a send source only: no remote access
			require.NoError(t, err)
			lines := []string{}
			expect := func(want string) {
				t.Helper()
				for {
					l, err := out.ReadString('\n')
					require.NoError(t, err, "child output so far: %q", lines)
					l = strings.TrimSpace(l)
					lines = append(lines, l)
					if l == want {
						return
					}
					require.False(t, strings.HasPrefix(l, "error"), l)
				}
			}
			expect("connected")
			require.NoError(t, srv.qp.PostSend([]verbs.SendWR{{Opcode: verbs.OpSend, Flags: verbs.SendSignaled,
				SG: []verbs.SGE{verbs.SGEOf(mr, payload)}}}))
			require.NoError(t, srv.complete())
			expect("scanned")
			require.NoError(t, mr.Dereg())
			copy(payload, s2) // after Dereg
			_, err = io.WriteString(in, "go\n")
			require.NoError(t, err)
			expect("done")
			for _, l := range lines {
				assert.False(t, strings.HasPrefix(l, "found"), "the peer read what it was not sent: %s", l)
				assert.False(t, strings.HasPrefix(l, "mode"), "the peer holds a memfd open to other uids: %s", l)
			}
			for off := 0; off+len(marker) <= len(block); off++ {
				if bytes.Equal(block[off:off+len(marker)], marker) {
					t.Fatalf("the peer wrote into the server's memory at offset %d", off)
				}
			}
			t.Logf("child: %q", lines)
		})
	}
}

// holdChild opens arg's count of TCP connections from one source address
// to a soft listener and sends nothing on them (a host holding handshake
// slots), until its stdin closes.
func holdChild(arg string) int {
	f := strings.Fields(arg) // addr src count
	if len(f) != 3 {
		return 2
	}
	n, _ := strconv.Atoi(f[2])
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(f[1])}}
	var held []net.Conn
	for i := 0; i < n; i++ {
		c, err := d.Dial("tcp", f[0])
		if err != nil {
			fmt.Println("error", err)
			return 3
		}
		held = append(held, c)
	}
	fmt.Println("holding", len(held))
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range held {
		c.Close()
	}
	return 0
}

// One host holding every handshake slot it can get does not lock out
// another: a child (as nobody) opens 64 silent connections from 127.0.2.2,
// as many as a listener has slots, and a client from 127.0.2.3 still
// connects at once, as does one from 127.0.2.2. Before slots were counted per host, the 64 held them
// all and the client's connection was closed on arrival.
func TestHandshakeSlotsPerHost(t *testing.T) {
	needRoot(t)
	defer soft.SetHandshakeTimeout(soft.SetHandshakeTimeout(time.Minute)) // they would hold them that long
	srv, addr := listenSoft(t, net.IPv4(127, 0, 2, 1))
	defer srv.close()
	_, in, out := startChild(t, "hold", addr+" 127.0.2.2 64", nobody)
	l, err := out.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "holding 64\n", l)
	time.Sleep(100 * time.Millisecond) // the listener has taken them all by now
	done := make(chan error, 1)
	go func() { done <- srv.accept() }()
	c, err := dialSoftFrom(net.IPv4(127, 0, 2, 3), addr)
	if c != nil {
		defer c.close()
	}
	require.NoError(t, err, "a client from another host was locked out")
	require.NoError(t, <-done)
	// A client from the holding host itself gets past its silent
	// neighbours too (the oldest of them makes way).
	go func() { done <- srv.accept() }()
	c2, err := dialSoftFrom(net.IPv4(127, 0, 2, 2), addr)
	if c2 != nil {
		defer c2.close()
	}
	require.NoError(t, err, "a client was locked out by silent connections from its own host")
	require.NoError(t, <-done)
	in.Close()
}

// nameChild is a TCP client (as another uid) that sends soft connection
// requests whose shared-memory offer names an abstract unix socket, in the
// format the offer once had and in today's with the name appended.
func nameChild(arg string) int {
	f := strings.Fields(arg) // addr socket-name
	if len(f) != 2 {
		return 2
	}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return 3
	}
	boot = bytes.TrimSpace(boot)
	token := make([]byte, 16)
	name := []byte(f[1])
	old := append(append(append(append([]byte("SHM1"), boot...), token...), byte(len(name))), name...)
	cur := append(append(append([]byte("SHM2"), boot...), token...), name...)
	for _, ext := range [][]byte{old, cur} {
		c, err := net.Dial("tcp", f[0])
		if err != nil {
			fmt.Println("error", err)
			return 3
		}
		_, _ = c.Write(soft.RawREQ(3, ext))
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		_, _ = c.Read(make([]byte, 64))
		c.Close()
	}
	fmt.Println("sent")
	return 0
}

// The listener never dials a unix socket named by a request: a client of
// another uid sends requests naming a root service's abstract socket, and
// nothing connects to that socket. Before, the listener dialled it as root
// and wrote 16 bytes of the client's choice to it.
func TestListenerDialsNoNameFromRequest(t *testing.T) {
	needRoot(t)
	_, h := randomHex(t, 8)
	name := "rdma-test-victim-" + h
	victim, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: "@" + name, Net: "unixpacket"})
	require.NoError(t, err)
	defer victim.Close()
	dialled := make(chan struct{}, 4)
	go func() {
		for {
			c, err := victim.Accept()
			if err != nil {
				return
			}
			dialled <- struct{}{}
			c.Close()
		}
	}()
	srv, addr := listenSoft(t, net.IPv4(127, 0, 2, 1))
	defer srv.close()
	go func() {
		// Refuse whatever requests come through (they do: their offer is
		// ignored and TCP is picked).
		for {
			ev, err := srv.ch.GetEvent(time.Now().Add(10 * time.Second))
			if err != nil {
				return
			}
			if ev.Type == verbs.EventConnectRequest {
				_ = ev.ID.Reject(nil)
				_ = ev.ID.Destroy()
			}
		}
	}()
	cmd, _, out := startChild(t, "name", addr+" "+name, nobody)
	l, err := out.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "sent\n", l)
	require.NoError(t, cmd.Wait())
	select {
	case <-dialled:
		t.Fatal("the listener dialled the socket a request named")
	case <-time.After(200 * time.Millisecond):
	}
}
