package rdma

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmanet/rdma/internal/phase"
	"github.com/rdmanet/rdma/internal/rsocketconn"
	"github.com/rdmanet/rdma/internal/stream"
	"github.com/rdmanet/rdma/verbs"
)

// ListenConfig holds options for listening.
type ListenConfig struct {
	// Config tunes accepted connections; nil means defaults.
	Config *Config
}

// Listener accepts RDMA connections. *Listener implements net.Listener.
//
// On a host with an RDMA device a Listener has two sides on the same
// ip:port, handed out through one Accept: rdmacore (the RDMA connection
// manager's port space) and soft (a TCP listener), for peers without a
// device; Config.RDMAOnly leaves the soft side out. Conn.Provider says which
// side a connection came in on.
type Listener struct {
	provider string
	cfg      Config
	sides    []listenSide        // the provider's own first, then soft's (mixed.go)
	rs       *rsocketconn.Params // rsocket mode (rsocket_dial.go), else nil
	addr     *Addr

	ready     chan net.Conn // established connections waiting for Accept
	done      chan struct{} // closed by Close
	ctx       context.Context
	cancel    context.CancelFunc // ends handshakes in progress
	closeOnce sync.Once
	slots     chan struct{} // bounds handshakes in progress
	wg        sync.WaitGroup

	trafficClass atomic.Int32 // cfg.TrafficClass, or SetTrafficClass's
}

// SetTrafficClass sets the traffic class (IP type of service, 0..255; see
// Config.TrafficClass) of the connections the listener accepts from now on.
func (l *Listener) SetTrafficClass(tc int) error {
	if tc < 0 || tc > 255 {
		return opError("set traffic class", l.addr, nil, fmt.Errorf("traffic class %d is not in 0..255", tc))
	}
	l.trafficClass.Store(int32(tc))
	return nil
}

// listenBacklog is the connection manager backlog and the number of
// established connections that may wait for Accept.
const listenBacklog = 128

// maxHandshakes bounds connection requests being set up at once; more wait
// for one of them to end.
const maxHandshakes = 64

// Listen announces on the local address ("host:port"; port 0 picks one) on
// network "rdma", "rdma4", "rdma6" (or their "tcp" aliases).
func Listen(network, address string) (net.Listener, error) {
	var lc ListenConfig
	return lc.Listen(context.Background(), network, address)
}

// Listen announces on the local address; see the package function Listen.
// The result is a *Listener.
func (lc *ListenConfig) Listen(ctx context.Context, network, address string) (net.Listener, error) {
	fail := func(la net.Addr, err error) (net.Listener, error) {
		return nil, opError("listen", la, nil, err)
	}
	tcpNet, err := tcpNetwork(network)
	if err != nil {
		return fail(nil, err)
	}
	ta, err := resolveTCP(ctx, tcpNet, address)
	if err != nil {
		return fail(nil, err)
	}
	la := fromTCPAddr(ta)
	cfg := lc.Config.withDefaults()
	rs, err := newRsListen(lc.Config)
	if err != nil {
		return fail(la, err)
	}
	prov, err := chooseProvider(cfg.Provider)
	if err != nil {
		return fail(la, err)
	}
	sides, err := listenSides(prov, ta, cfg) // mixed.go
	if err != nil {
		return fail(la, err)
	}
	l := &Listener{
		provider: prov.Name(),
		cfg:      cfg,
		sides:    sides,
		rs:       rs,
		addr:     fromTCPAddr(sides[0].id.LocalAddr()),
		ready:    make(chan net.Conn, listenBacklog),
		done:     make(chan struct{}),
		slots:    make(chan struct{}, maxHandshakes),
	}
	if l.addr == nil {
		l.addr = la
	}
	l.trafficClass.Store(int32(cfg.TrafficClass))
	l.ctx, l.cancel = context.WithCancel(context.Background())
	for _, sd := range sides {
		l.wg.Add(1)
		go l.loop(sd)
	}
	registerListener(l) // registry.go
	return l, nil
}

// Accept waits for and returns the next connection: a *Conn, or an
// *RsocketConn when Config.Wire asks for the rsocket wire.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case <-l.done:
		return nil, opError("accept", l.addr, nil, net.ErrClosed)
	}
}

// AcceptRDMA waits for and returns the next connection.
func (l *Listener) AcceptRDMA() (*Conn, error) {
	if l.rs != nil {
		return nil, opError("accept", l.addr, nil, errAcceptRsocket)
	}
	c, err := l.Accept()
	if err != nil {
		return nil, err
	}
	return c.(*Conn), nil
}

// handOut hands an established connection to Accept, or closes it if the
// listener closes first.
func (l *Listener) handOut(c net.Conn) {
	select {
	case l.ready <- c:
	case <-l.done:
		c.Close()
	}
}

// Close stops listening. A pending Accept returns net.ErrClosed; connections
// already accepted stay open.
func (l *Listener) Close() error {
	err := error(net.ErrClosed)
	l.closeOnce.Do(func() {
		err = nil
		unregisterListener(l) // registry.go
		close(l.done)
		l.cancel()
		for _, sd := range l.sides {
			sd.close() // ends its loop
		}
		l.wg.Wait()
		for {
			select {
			case c := <-l.ready:
				c.Close()
				continue
			default:
			}
			break
		}
	})
	if err != nil {
		return opError("close", l.addr, nil, err)
	}
	return nil
}

// Addr returns the listener's address.
func (l *Listener) Addr() net.Addr { return l.addr }

// Provider names the verbs provider the listener accepts on: "rdmacore" on
// a host with a device (whose listener also accepts soft connections unless
// Config.RDMAOnly is set), else "soft".
func (l *Listener) Provider() string { return l.provider }

// loop receives connection requests and hands each to a handshake goroutine,
// so that a slow or silent peer never holds up the others.
func (l *Listener) loop(sd listenSide) {
	defer l.wg.Done()
	prov := sd.prov
	for {
		ev, err := sd.ech.GetEvent(time.Time{})
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			return
		}
		if ev.Type != verbs.EventConnectRequest || ev.ID == nil {
			continue // events of requests not yet migrated, e.g. a peer that gave up
		}
		phase.Mark("listen: request taken")
		// With maxHandshakes under way, a request waits in the connection
		// manager's queue for one to end (its dialer has been told to
		// wait, or its NIC retries), as a burst of dials from a pool would
		// be refused otherwise; the backlog bounds what waits.
		select {
		case l.slots <- struct{}{}:
		case <-l.ctx.Done():
			// Closing: refuse what is left in the queue until it closes.
			ev.ID.Reject(stream.MarshalReject(stream.RejectNoResources))
			ev.ID.Destroy()
			continue
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer func() { <-l.slots }()
			l.handshake(prov, ev)
		}()
	}
}

// handshake runs the passive side for one connection request.
func (l *Listener) handshake(prov verbs.Provider, ev verbs.CMEvent) {
	if l.rs != nil {
		l.handshakeRsocket(prov, ev) // rsocket_dial.go
		return
	}
	phase.Mark("listen: handshake running")
	peer, err := stream.ParseHello(ev.Param.PrivateData)
	if err != nil {
		refuse(ev.ID, stream.MarshalReject(stream.RejectBadHello))
		return
	}
	l.accept(prov, ev.ID, stream.MarshalReject(stream.RejectNoResources), func(ech verbs.EventChannel) (establishing, *verbs.ConnParam, error) {
		// A peer of version 3 on moves to a larger ring when it needs one;
		// an older one gets RingSize at once.
		c, err := newConn(prov.Name(), ech, ev.ID, l.cfg, peer.Version >= stream.VersionGrow)
		if err != nil {
			return nil, nil, err
		}
		phase.Mark("listen: endpoint created")
		c.setPeer(peer)
		h := c.hello()
		h.Version = min(peer.Version, stream.Version)
		if len(l.sides) > 1 && prov.Name() == ProviderSoft {
			h.Flags |= stream.FlagRDMACM // the soft side of a mixed listener
		}
		return c, &verbs.ConnParam{PrivateData: h.Marshal(), ResponderResources: c.rdAtom(), InitiatorDepth: c.rdAtom(), RetryCount: 7, RNRRetryCount: 7}, nil
	})
}

// refuse rejects a connection request with private data why.
func refuse(id verbs.CMID, why []byte) {
	id.Reject(why)
	id.Destroy()
}

// accept runs the passive side's steps that both wires share for the
// request on id: an event channel of the connection's own, the
// connection's resources and its answer (setup, which also takes in the
// peer's half of the handshake), the transport timeout and traffic class,
// the accept and, on a NIC, the wait until the connection is established;
// then it hands the started connection to Accept. A request it cannot set
// up is rejected with noRes.
func (l *Listener) accept(prov verbs.Provider, id verbs.CMID, noRes []byte, setup func(ech verbs.EventChannel) (establishing, *verbs.ConnParam, error)) {
	ech, err := prov.CreateEventChannel()
	if err != nil {
		refuse(id, noRes)
		return
	}
	var c establishing
	var param *verbs.ConnParam
	if err = id.Migrate(ech); err == nil {
		c, param, err = setup(ech)
	}
	if err != nil {
		refuse(id, noRes)
		ech.Close()
		return
	}
	err = id.SetAckTimeout(ackTimeoutExp)
	if tc := l.trafficClass.Load(); tc != 0 && err == nil {
		err = id.SetTOS(int(tc))
	}
	if err == nil {
		err = id.Accept(param)
	}
	// A NIC's QP may drop what arrives before the peer's QP is ready to
	// receive (and retransmit it a timeout later): hand the connection
	// out once the peer has said it is. (The rsocket wire waits on every
	// provider, as rsocket.c's accept does.)
	if err != nil || (prov.Name() != ProviderSoft || l.rs != nil) && !l.awaitEstablished(id, ech) {
		c.releaseVerbs()
		id.Destroy()
		ech.Close()
		return
	}
	// On soft, the connection is handed out as soon as it is accepted:
	// the QP can send, and the peer's frames can only follow its RTU on
	// the same transport. Waiting for the RTU cost two goroutine wake-ups
	// (soft's receiver, then this one) per accept. A peer that never
	// sends it fails the connection: soft gives up on the RTU after twice
	// its handshake timeout and flushes the QP.
	c.start()
	phase.Mark("listen: accepted")
	l.accepted(c) // registry.go
	l.handOut(c)
}

// awaitEstablished waits, within the handshake timeout, for the accepted
// connection on id to be established; a connection that is not is
// disconnected.
func (l *Listener) awaitEstablished(id verbs.CMID, ech verbs.EventChannel) bool {
	ctx, cancel := context.WithTimeout(l.ctx, l.cfg.HandshakeTimeout)
	est, err := waitEvent(ctx, ech)
	cancel()
	if err != nil || est.Type != verbs.EventEstablished {
		id.Disconnect()
		return false
	}
	return true
}
