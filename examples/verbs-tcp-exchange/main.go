// Command verbs-tcp-exchange is the classic RDMA program in Go: two
// processes set up reliable connected queue pairs without the RDMA
// connection manager. They exchange what each QP needs to reach the other
// (QP number, first PSN, LID, GID, MTU, and a buffer's address and rkey)
// over a TCP socket, move their QPs RESET -> INIT -> RTR -> RTS with
// package verbs, and the client RDMA WRITEs a buffer into the server's
// memory, RDMA READs it back, and compares. rc_pingpong and perftest set
// up their QPs this way.
//
//	verbs-tcp-exchange -server -addr 127.0.0.1:18515
//	verbs-tcp-exchange -addr 127.0.0.1:18515
//
// The provider is -provider, else $RDMA_PROVIDER, else soft. A device is
// reached through the GID of the IP address the TCP socket uses (on soft,
// the device is given that address with soft.Bind; on RoCE it is the
// netdev's), unless -gid-index says which.
package main

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/rdmanet/rdma/verbs"
	_ "github.com/rdmanet/rdma/verbs/rdmacore"
	"github.com/rdmanet/rdma/verbs/soft"
)

func main() {
	server := flag.Bool("server", false, "wait for the client (else connect to -addr)")
	addr := flag.String("addr", "127.0.0.1:18515", "TCP address of the server's exchange socket")
	provider := flag.String("provider", "", "verbs provider (default $RDMA_PROVIDER, else soft)")
	device := flag.String("dev", "", "device name (default: the provider's first)")
	gidIndex := flag.Int("gid-index", -1, "local GID index (default: the GID of the socket's IP address)")
	size := flag.Int("size", 1<<20, "bytes to WRITE and READ back")
	timeout := flag.Duration("timeout", time.Minute, "bound on the whole run")
	flag.Parse()
	log.SetFlags(0)
	if *provider == "" {
		*provider = os.Getenv("RDMA_PROVIDER")
	}
	if *provider == "" {
		*provider = soft.Name
	}
	deadline := time.Now().Add(*timeout)
	c, err := exchangeSocket(*server, *addr, deadline)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if err := run(c, *server, *provider, *device, *gidIndex, *size, deadline); err != nil {
		log.Fatal(err)
	}
}

// exchangeSocket is the TCP connection the two sides exchange their QPs'
// parameters over: the server accepts one client.
func exchangeSocket(server bool, addr string, deadline time.Time) (net.Conn, error) {
	if !server {
		d := net.Dialer{Deadline: deadline}
		return d.Dial("tcp", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	fmt.Printf("listening on %s\n", ln.Addr())
	_ = ln.(*net.TCPListener).SetDeadline(deadline)
	return ln.Accept()
}

// dest is what one side tells the other: rc_pingpong's "LID QPN PSN GID",
// the MTU, and the buffer the peer may write and read.
type dest struct {
	QPN  uint32
	PSN  uint32
	LID  uint16
	MTU  uint8
	_    uint8
	GID  verbs.GID
	Addr uint64
	Len  uint32
	RKey uint32
}

const destSize = 44 // binary.Size(dest{})

// swap sends ours and reads the peer's: a fixed-size message each way,
// within the deadline.
func swap(c net.Conn, ours dest, deadline time.Time) (dest, error) {
	_ = c.SetDeadline(deadline)
	var peer dest
	if err := binary.Write(c, binary.BigEndian, &ours); err != nil {
		return peer, err
	}
	err := binary.Read(io.LimitReader(c, destSize), binary.BigEndian, &peer)
	return peer, err
}

func run(c net.Conn, server bool, provider, device string, gidIndex, size int, deadline time.Time) error {
	p, err := verbs.Lookup(provider)
	if err != nil {
		return err
	}
	if device == "" {
		devs, err := p.Devices()
		if err != nil {
			return err
		}
		if len(devs) == 0 {
			return fmt.Errorf("provider %s has no device", provider)
		}
		device = devs[0].Name
	}
	ctx, err := p.Open(device)
	if err != nil {
		return err
	}
	defer ctx.Close()
	local := c.LocalAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	if p.Name() == soft.Name {
		// A soft device has no netdev: it takes the socket's address.
		if err := soft.Bind(ctx, netip.AddrPortFrom(local, 0)); err != nil {
			return err
		}
	}
	port, err := ctx.QueryPort(1)
	if err != nil {
		return err
	}
	if gidIndex < 0 {
		if gidIndex, err = findGID(ctx, port.GIDTblLen, local); err != nil {
			return err
		}
	}
	gid, err := ctx.QueryGID(1, gidIndex)
	if err != nil {
		return err
	}

	pd, err := ctx.AllocPD()
	if err != nil {
		return err
	}
	defer pd.Dealloc()
	cq, err := ctx.CreateCQ(16, nil)
	if err != nil {
		return err
	}
	defer cq.Destroy()
	// One region: the first half is what the peer writes and reads (or,
	// on the client, the source of the WRITE), the second where the READ
	// lands.
	mem, err := verbs.AllocMemory(2 * size)
	if err != nil {
		return err
	}
	defer mem.Free()
	buf := mem.Bytes()[:2*size]
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	if err != nil {
		return err
	}
	defer mr.Dereg()
	qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return err
	}
	defer qp.Destroy()

	psn, err := rand.Int(rand.Reader, big.NewInt(1<<24))
	if err != nil {
		return err
	}
	ours := dest{QPN: qp.Num(), PSN: uint32(psn.Int64()), LID: port.LID, MTU: uint8(port.ActiveMTU), GID: gid,
		Addr: verbs.AddrOf(buf[:size]), Len: uint32(size), RKey: mr.RKey()}
	peer, err := swap(c, ours, deadline)
	if err != nil {
		return fmt.Errorf("exchanging QP parameters: %w", err)
	}
	if peer.Len != uint32(size) {
		return fmt.Errorf("the peer's buffer has %d bytes, not %d (run both sides with the same -size)", peer.Len, size)
	}
	if err := connect(qp, &ours, &peer, gidIndex); err != nil {
		return err
	}
	log.Printf("local  QP %#06x PSN %#06x LID %d GID %s", ours.QPN, ours.PSN, ours.LID, net.IP(ours.GID[:]))
	log.Printf("remote QP %#06x PSN %#06x LID %d GID %s", peer.QPN, peer.PSN, peer.LID, net.IP(peer.GID[:]))

	var verdict [1]byte
	if server {
		// The client says when it is through; its WRITE is in our memory
		// by then, and we check it too.
		if _, err := io.ReadFull(c, verdict[:]); err != nil {
			return fmt.Errorf("waiting for the client: %w", err)
		}
		if verdict[0] != 1 {
			return errors.New("the client's READ brought back other bytes than it wrote")
		}
		if !bytes.Equal(buf[:size], pattern(size)) {
			return errors.New("the bytes the client wrote are not in this buffer")
		}
		fmt.Printf("verbs-tcp-exchange server: %d bytes received by RDMA WRITE and read back by the client: checked\n", size)
		_, err = c.Write([]byte{1})
		return err
	}
	src, back := buf[:size], buf[size:]
	copy(src, pattern(size))
	start := time.Now()
	if err := postWait(qp, cq, verbs.SendWR{WRID: 1, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(mr, src)}, RemoteAddr: peer.Addr, RKey: peer.RKey}, deadline); err != nil {
		return fmt.Errorf("RDMA WRITE: %w", err)
	}
	if err := postWait(qp, cq, verbs.SendWR{WRID: 2, Opcode: verbs.OpRDMARead, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(mr, back)}, RemoteAddr: peer.Addr, RKey: peer.RKey}, deadline); err != nil {
		return fmt.Errorf("RDMA READ: %w", err)
	}
	took := time.Since(start)
	match := bytes.Equal(src, back)
	if match {
		verdict[0] = 1
	}
	if _, err := c.Write(verdict[:]); err != nil {
		return err
	}
	// The server's answer: it checked its buffer too.
	if _, err := io.ReadFull(c, verdict[:]); err != nil || verdict[0] != 1 {
		return fmt.Errorf("the server did not confirm (%v)", err)
	}
	if !match {
		return errors.New("the READ brought back other bytes than the WRITE sent")
	}
	fmt.Printf("verbs-tcp-exchange: %d bytes RDMA WRITTEN and READ back, match (QP %#x -> %#x, %s, %v)\n",
		size, ours.QPN, peer.QPN, provider, took.Round(time.Microsecond))
	return nil
}

// findGID is the index of the GID of ip in port 1's table (RoCE v2 lists
// each IP address of the netdev; a soft device its one).
func findGID(ctx verbs.Context, n int, ip netip.Addr) (int, error) {
	want := verbs.GID(ip.As16())
	for i := 0; i < n; i++ {
		if g, err := ctx.QueryGID(1, i); err == nil && g == want {
			return i, nil
		}
	}
	return 0, fmt.Errorf("no GID of %s port 1 is %s: give -gid-index", ctx.Name(), ip)
}

// connect moves qp to RTS with the peer's parameters: the transitions
// and the attributes each one requires (verbs.RCTransition).
func connect(qp verbs.QP, ours, peer *dest, gidIndex int) error {
	steps := []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{State: verbs.QPSInit, PKeyIndex: 0, PortNum: 1,
			AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead},
			verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags},
		{verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU(min(ours.MTU, peer.MTU)), DestQPNum: peer.QPN,
			RQPSN: peer.PSN, MaxDestRdAtomic: 1, MinRNRTimer: 12,
			AH: verbs.AHAttr{DLID: peer.LID, IsGlobal: true, PortNum: 1,
				GRH: verbs.GlobalRoute{DGID: peer.GID, SGIDIndex: gidIndex, HopLimit: 1}}},
			verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN |
				verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer},
		{verbs.QPAttr{State: verbs.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: ours.PSN, MaxRdAtomic: 1},
			verbs.QPAttrState | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrSQPSN |
				verbs.QPAttrMaxRdAtomic},
	}
	for _, s := range steps {
		if err := qp.Modify(&s.attr, s.mask); err != nil {
			return fmt.Errorf("moving the QP to %v: %w", s.attr.State, err)
		}
	}
	return nil
}

// postWait posts one WR and polls for its completion.
func postWait(qp verbs.QP, cq verbs.CQ, wr verbs.SendWR, deadline time.Time) error {
	if err := qp.PostSend([]verbs.SendWR{wr}); err != nil {
		return err
	}
	wc := make([]verbs.WC, 1)
	for {
		n, err := cq.Poll(wc)
		if err != nil {
			return err
		}
		if n == 1 {
			if wc[0].Status != verbs.WCSuccess {
				return fmt.Errorf("completion: %v", wc[0].Status)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("no completion before the deadline")
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// pattern is the bytes the client writes.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*131 + i>>8)
	}
	return b
}
