package rdma

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/rdmanet/rdma/internal/phase"
	"github.com/rdmanet/rdma/internal/stream"
	"github.com/rdmanet/rdma/verbs"
)

// Dialer holds options for connecting to an RDMA listener. The zero value
// is ready to use.
type Dialer struct {
	// Timeout bounds the whole connect (address and route resolution, the
	// handshake); zero means no bound beyond the context's.
	Timeout time.Duration
	// LocalAddr is the local address to connect from (*Addr or
	// *net.TCPAddr); nil picks one.
	LocalAddr net.Addr
	// Config tunes the connection; nil means defaults.
	Config *Config
}

// Dial connects to the RDMA listener at address ("host:port") on network
// "rdma", "rdma4", "rdma6" (or their "tcp" aliases).
func Dial(network, address string) (net.Conn, error) {
	var d Dialer
	return d.Dial(network, address)
}

// Dial connects to address; see the package function Dial.
func (d *Dialer) Dial(network, address string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

// ackTimeoutExp is the QP's transport timeout exponent, set with
// rdma_set_option before Connect and Accept (an RTS QP refuses it): a peer
// that stops answering is declared dead within a few seconds, 4.096 us *
// 2^16 = 268 ms per try, 8 tries with the connection parameters' retry
// count of 7, instead of rdma_cm's default (2^20: 4.3 s per try, 34 s).
const ackTimeoutExp = 16

// resolveTimeout bounds address and route resolution when nothing else does.
const resolveTimeout = 5 * time.Second

// DialContext connects to address. ctx bounds the connect; once connected,
// ctx no longer matters. The result is a *Conn, or an *RsocketConn when
// Config.Wire asks for the rsocket wire.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	w, err := wireOf(d.Config)
	if err != nil {
		return nil, opError("dial", d.LocalAddr, nil, err)
	}
	if w == WireRsocket {
		// rsocket's sizes are its own defaults unless the Config sets them.
		return asConn(dialWire(d, ctx, network, address, connectRsocket(rsocketParams(d.Config)))) // rsocket_dial.go
	}
	return asConn(dialWire(d, ctx, network, address, connect))
}

// asConn is a dialed connection as a net.Conn: nil, not a nil *Conn, when
// the dial failed.
func asConn[C net.Conn](c C, err error) (net.Conn, error) {
	if err != nil {
		return nil, err
	}
	return c, nil
}

// connectFunc is one wire's active side of the connection manager's
// handshake, from resolving the route to the established connection.
type connectFunc[C wireConn] func(ctx context.Context, prov verbs.Provider, src, dst *net.TCPAddr, cfg Config) (C, error)

// dialWire is the dial of either wire: it resolves the address as net.Dial
// does, picks the provider, bounds the connect by d.Timeout and connects
// with connect, falling back to soft where connectWithFallback (mixed.go)
// says; its errors are *net.OpError with net.Dial's timeout error.
func dialWire[C wireConn](d *Dialer, ctx context.Context, network, address string, connect connectFunc[C]) (C, error) {
	var none C
	var raddr net.Addr
	if ctx == nil {
		panic("rdma: nil context")
	}
	fail := func(err error) (C, error) {
		return none, opError("dial", d.LocalAddr, raddr, ctxError(err))
	}
	tcpNet, err := tcpNetwork(network)
	if err != nil {
		return fail(err)
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	rt, err := resolveTCP(ctx, tcpNet, address)
	if err != nil {
		return fail(err)
	}
	raddr = fromTCPAddr(rt)
	phase.Mark("dial: address resolved")
	src, err := toTCPAddr(d.LocalAddr)
	if err != nil {
		return fail(err)
	}
	cfg := d.Config.withDefaults()
	prov, err := chooseProvider(cfg.Provider)
	if err != nil {
		return fail(err)
	}
	if d.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.Timeout)
		defer cancel()
	}
	c, err := connectWithFallback(ctx, prov, src, rt, cfg, connect) // mixed.go
	if err != nil {
		return fail(err)
	}
	return c, nil
}

// resolveTCP resolves address as net.Dial would, honouring ctx.
func resolveTCP(ctx context.Context, network, address string) (*net.TCPAddr, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	if host == "" {
		// As net.Dial: an empty host is the local system.
		return net.ResolveTCPAddr(network, address)
	}
	if ip := net.ParseIP(host); ip != nil {
		return net.ResolveTCPAddr(network, address)
	}
	ips, err := net.DefaultResolver.LookupIP(ctx, map[string]string{"tcp": "ip", "tcp4": "ip4", "tcp6": "ip6"}[network], host)
	if err != nil {
		return nil, err
	}
	p, err := net.DefaultResolver.LookupPort(ctx, network, port)
	if err != nil {
		return nil, err
	}
	return &net.TCPAddr{IP: ips[0], Port: p}, nil
}

// cmDial is the active side of the connection manager up to the route: an
// event channel and an ID resolved to the peer.
type cmDial struct {
	ctx context.Context
	ech verbs.EventChannel
	id  verbs.CMID
}

// resolveCM creates the channel and the ID, gives the ID the traffic class
// (tos, unless 0) and resolves dst's address and route, within ctx. On
// failure it releases what it created.
func resolveCM(ctx context.Context, prov verbs.Provider, src, dst *net.TCPAddr, tos int) (*cmDial, error) {
	ech, err := prov.CreateEventChannel()
	if err != nil {
		return nil, err
	}
	id, err := ech.CreateID()
	if err != nil {
		ech.Close()
		return nil, err
	}
	d := &cmDial{ctx: ctx, ech: ech, id: id}
	if err := d.resolve(src, dst, tos); err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

func (d *cmDial) resolve(src, dst *net.TCPAddr, tos int) error {
	if tos != 0 {
		// Before the route is resolved: it is chosen with it.
		if err := d.id.SetTOS(tos); err != nil {
			return err
		}
	}
	if err := d.id.ResolveAddr(src, dst, stepTimeout(d.ctx)); err != nil {
		return err
	}
	if _, err := d.wait(verbs.EventAddrResolved); err != nil {
		return err
	}
	if err := d.id.ResolveRoute(stepTimeout(d.ctx)); err != nil {
		return err
	}
	_, err := d.wait(verbs.EventRouteResolved)
	return err
}

// wait waits for the next event, which must be want.
func (d *cmDial) wait(want verbs.CMEventType) (verbs.CMEvent, error) {
	ev, err := waitEvent(d.ctx, d.ech)
	if err != nil {
		return ev, err
	}
	if ev.Type != want {
		if err := d.ctx.Err(); err != nil {
			// The provider gave up as our deadline passed: the deadline
			// is the cause the caller asked about.
			return ev, err
		}
		return ev, eventError(ev)
	}
	return ev, nil
}

// close releases the ID and the channel.
func (d *cmDial) close() {
	d.id.Destroy()
	d.ech.Close()
}

// connect runs the active side of the connection manager's handshake with
// this package's wire.
func connect(ctx context.Context, prov verbs.Provider, src, dst *net.TCPAddr, cfg Config) (*Conn, error) {
	return connectSteps(ctx, prov, src, dst, cfg.TrafficClass, func(ech verbs.EventChannel, id verbs.CMID) (*Conn, *verbs.ConnParam, error) {
		c, err := newConn(prov.Name(), ech, id, cfg, true)
		if err != nil {
			return nil, nil, err
		}
		phase.Mark("dial: endpoint created")
		h := c.hello()
		return c, &verbs.ConnParam{PrivateData: h.Marshal(), ResponderResources: c.rdAtom(), InitiatorDepth: c.rdAtom(), RetryCount: 7, RNRRetryCount: 7}, nil
	})
}

// establishing is a connection of either wire between its setup and its
// start.
type establishing interface {
	net.Conn
	releaseVerbs()
	start()
}

// dialing is a connection of either wire on the active side.
type dialing interface {
	establishing
	// takeAnswer takes in the listener's half of the handshake, or
	// refuses it.
	takeAnswer(private []byte) error
}

// connectSteps runs the active side's steps that both wires share: the
// connection manager's ID resolved to dst (with traffic class tos), the
// connection's resources and its half of the handshake (setup), the
// transport timeout, the connect, and once established the listener's
// half (a listener whose half is refused is disconnected). The connection
// is started on success, released on failure.
func connectSteps[C dialing](ctx context.Context, prov verbs.Provider, src, dst *net.TCPAddr, tos int,
	setup func(ech verbs.EventChannel, id verbs.CMID) (C, *verbs.ConnParam, error)) (C, error) {
	var none C
	d, err := resolveCM(ctx, prov, src, dst, tos)
	if err != nil {
		return none, err
	}
	phase.Mark("dial: route resolved")
	c, param, err := setup(d.ech, d.id)
	if err != nil {
		d.close()
		return none, err
	}
	fail := func(err error) (C, error) {
		c.releaseVerbs()
		d.close()
		return none, err
	}
	if err := d.id.SetAckTimeout(ackTimeoutExp); err != nil {
		return fail(err)
	}
	if err := d.id.Connect(param); err != nil {
		return fail(err)
	}
	phase.Mark("dial: connect requested")
	ev, err := d.wait(verbs.EventEstablished)
	if err != nil {
		return fail(err)
	}
	phase.Mark("dial: established")
	if err := c.takeAnswer(ev.Param.PrivateData); err != nil {
		d.id.Disconnect()
		return fail(err)
	}
	c.start()
	return c, nil
}

// stepTimeout is the timeout handed to the provider for one resolution
// step. With a deadline it runs a little past it, so that the deadline, not
// the provider's timer, ends a dial that runs out of time: the caller then
// gets the timeout error it asked for.
func stepTimeout(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return max(time.Until(dl), 0) + 500*time.Millisecond
	}
	return resolveTimeout
}

// waitEvent waits for the next connection manager event, or for ctx.
func waitEvent(ctx context.Context, ech verbs.EventChannel) (verbs.CMEvent, error) {
	for {
		// GetEvent takes a deadline, not a context: wait in slices so that a
		// cancellation is seen promptly.
		dl := time.Now().Add(100 * time.Millisecond)
		if cd, ok := ctx.Deadline(); ok && cd.Before(dl) {
			dl = cd
		}
		ev, err := ech.GetEvent(dl)
		if err == nil {
			return ev, nil
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return ev, err
		}
		if err := ctx.Err(); err != nil {
			return ev, err
		}
	}
}

// eventError turns an unexpected connection manager event into an error.
func eventError(ev verbs.CMEvent) error {
	switch ev.Type {
	case verbs.EventRejected:
		switch stream.ParseReject(ev.Param.PrivateData) {
		case stream.RejectBadHello:
			return errRefusedHello
		case stream.RejectNoResources:
			return errRefusedNoRes
		}
		return syscall.ECONNREFUSED
	case verbs.EventUnreachable:
		return syscall.EHOSTUNREACH
	case verbs.EventAddrError, verbs.EventRouteError, verbs.EventConnectError:
		if ev.Status != 0 {
			errno := syscall.Errno(ev.Status)
			if ev.Status < 0 {
				errno = syscall.Errno(-ev.Status)
			}
			return fmt.Errorf("rdma: %v: %w", ev.Type, errno)
		}
		return fmt.Errorf("rdma: %v", ev.Type)
	}
	return fmt.Errorf("rdma: unexpected connection manager event %v", ev.Type)
}

// ctxError is err, but what net.Dial returns for a context whose deadline
// passed.
func ctxError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return os.ErrDeadlineExceeded // net.Dial's timeout error satisfies this too
	}
	return err
}
