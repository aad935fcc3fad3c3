package rdma

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/rdmanet/rdma/internal/core"
	"github.com/rdmanet/rdma/internal/provider"
	"github.com/rdmanet/rdma/internal/rsocket"
	"github.com/rdmanet/rdma/internal/stream"
	"github.com/rdmanet/rdma/verbs"
)

// Mixed fleets: some hosts have an RDMA device, some do not. A listener on a
// host with a device listens twice on the same ip:port, once in the RDMA
// connection manager's port space (rdmacore) and once on TCP (soft), so that
// hosts without a device reach the same service; a dial whose provider is
// auto tries rdmacore first and falls back to soft when the peer does not
// answer over the RDMA connection manager. The two port spaces are separate
// on InfiniBand and RoCE, so the same port number is free in both.

// listenSide is one provider's listening CM ID and the channel of its events.
type listenSide struct {
	prov verbs.Provider
	ech  verbs.EventChannel
	id   verbs.CMID
}

func (sd listenSide) close() {
	sd.id.Destroy()
	sd.ech.Close()
}

// mixedBindAttempts bounds the tries to find a port (when the caller asked
// for port 0) that is free in both port spaces.
const mixedBindAttempts = 16

// listenSides binds and listens at ta with prov and, when prov is not soft
// and cfg allows it, with soft at the same port.
func listenSides(prov verbs.Provider, ta *net.TCPAddr, cfg Config) ([]listenSide, error) {
	mixed := prov.Name() != ProviderSoft && !cfg.RDMAOnly
	var soft verbs.Provider
	if mixed {
		var err error
		if soft, err = verbs.Lookup(ProviderSoft); err != nil {
			return nil, err
		}
	}
	for attempt := 1; ; attempt++ {
		first, err := listenOne(prov, ta)
		if err != nil || !mixed {
			if err != nil {
				return nil, err
			}
			return []listenSide{first}, nil
		}
		at := *first.id.LocalAddr()
		if ta.IP != nil {
			at.IP = ta.IP // as asked: the provider may report the device's address for a wildcard
		}
		second, err := listenOne(soft, &at)
		if err == nil {
			return []listenSide{first, second}, nil
		}
		first.close()
		if ta.Port != 0 || !errors.Is(err, syscall.EADDRINUSE) || attempt == mixedBindAttempts {
			return nil, fmt.Errorf("rdma: the soft side of a listener on a host with an RDMA device (set Config.RDMAOnly to listen without it): %w", err)
		}
		// The port the RDMA CM picked is taken on TCP: pick another.
	}
}

func listenOne(prov verbs.Provider, ta *net.TCPAddr) (listenSide, error) {
	ech, err := prov.CreateEventChannel()
	if err != nil {
		return listenSide{}, err
	}
	id, err := ech.CreateID()
	if err != nil {
		ech.Close()
		return listenSide{}, err
	}
	sd := listenSide{prov, ech, id}
	if err = id.BindAddr(ta); err == nil {
		err = id.Listen(listenBacklog)
	}
	if err != nil {
		sd.close()
		return listenSide{}, err
	}
	return sd, nil
}

// Errors of a listener that answered over the connection manager and
// refused: a peer that runs this package on a device, so no reason to fall
// back.
var (
	errRefusedHello = &core.Error{Msg: "the listener refused the handshake (malformed or unsupported version)", Errno: syscall.ECONNREFUSED}
	errRefusedNoRes = &core.Error{Msg: "the listener could not set up the connection", Errno: syscall.ECONNREFUSED}
)

// FallbackError is what Conn.Fallback returns: why a dial whose provider is
// auto, on a host with an RDMA device, is carried by soft.
type FallbackError struct {
	Provider string        // the provider tried first: "rdmacore"
	Err      error         // what that attempt ended with
	Elapsed  time.Duration // how long it took before soft was tried
}

func (e *FallbackError) Error() string {
	return fmt.Sprintf("rdma: fell back to soft after %v: %s attempt: %v", e.Elapsed.Round(time.Millisecond), e.Provider, e.Err)
}

func (e *FallbackError) Unwrap() error { return e.Err }

// connectWithFallback connects with prov; when prov was chosen by auto and
// is not soft, a failure that says the peer has no RDMA listener (no answer
// within cfg.RDMAConnectTimeout, unreachable, nothing listening, no RDMA
// route) is followed by a soft connect within what is left of ctx. A peer
// that answered only on soft is remembered (mixedmemory.go), and the next
// dial to it goes to soft at once; one whose soft side says it has an RDMA
// side too is forgotten.
func connectWithFallback[C wireConn](ctx context.Context, prov verbs.Provider, src, dst *net.TCPAddr, cfg Config, connect connectFunc[C]) (C, error) {
	var none C
	if prov.Name() == ProviderSoft || !provider.IsAuto(cfg.Provider) || cfg.RDMAConnectTimeout < 0 {
		return connect(ctx, prov, src, dst, cfg)
	}
	soft, err := verbs.Lookup(ProviderSoft)
	if err != nil {
		return connect(ctx, prov, src, dst, cfg)
	}
	key := dst.String()
	if since, ok := softOnlyPeers.Recall(key, time.Now()); ok {
		c, err := connect(ctx, soft, src, dst, cfg)
		if err == nil {
			if c.peerTakesRDMACM() {
				softOnlyPeers.Forget(key)
			}
			c.setFallback(&FallbackError{Provider: prov.Name(), Err: &rememberedError{since}})
			return c, nil
		}
		if ctx.Err() != nil {
			return none, ctx.Err()
		}
		// The peer changed: look again, RDMA first.
		softOnlyPeers.Forget(key)
	}
	start := time.Now()
	actx, cancel := context.WithTimeout(ctx, cfg.RDMAConnectTimeout)
	c, err := connect(actx, prov, src, dst, cfg)
	cancel()
	if err == nil {
		return c, nil
	}
	if ctx.Err() != nil {
		return none, ctx.Err() // the caller's bound, not ours
	}
	if !fallbackOn(err) {
		return none, err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("no answer over the RDMA connection manager within %v: %w", cfg.RDMAConnectTimeout, err)
	}
	fb := &FallbackError{Provider: prov.Name(), Err: err, Elapsed: time.Since(start)}
	if testHookAfterRDMAAttempt != nil {
		testHookAfterRDMAAttempt()
	}
	c, serr := connect(ctx, soft, src, dst, cfg)
	if serr != nil {
		return none, fmt.Errorf("%w (soft, after the %s attempt failed: %v)", serr, prov.Name(), err)
	}
	if !c.peerTakesRDMACM() {
		softOnlyPeers.Remember(key, time.Now())
	} else if errors.Is(err, syscall.ECONNREFUSED) {
		// The listener takes RDMA CM connections, yet nothing listened
		// there when we asked: it started in between (its sides start
		// together). Ask again over RDMA, which now answers, rather than
		// stay on soft for the connection's life.
		actx, cancel := context.WithTimeout(ctx, cfg.RDMAConnectTimeout)
		rc, rerr := connect(actx, prov, src, dst, cfg)
		cancel()
		if rerr == nil {
			_ = c.Close()
			return rc, nil
		}
	}
	c.setFallback(fb)
	return c, nil
}

// testHookAfterRDMAAttempt, when set by a test, runs between a failed
// RDMA attempt and the soft one.
var testHookAfterRDMAAttempt func()

// rememberedError is a FallbackError's cause when the peer was dialed on
// soft at once: it answered an earlier auto dial only on soft.
type rememberedError struct{ since time.Time }

func (e *rememberedError) Error() string {
	return fmt.Sprintf("the peer answered only on soft %v ago (remembered for %v)", time.Since(e.since).Round(time.Millisecond), softOnlyTTL)
}

// fallbackOn reports whether a failed rdmacore connect may be retried on
// soft: anything but a listener that answered and refused, or answered
// with a handshake of the wrong wire.
func fallbackOn(err error) bool {
	return !errors.Is(err, errRefusedHello) && !errors.Is(err, errRefusedNoRes) &&
		!errors.Is(err, stream.ErrHello) && !errors.Is(err, rsocket.ErrConnData)
}

// wireConn is what the dial's fallback asks of a connection of either
// wire.
type wireConn interface {
	*Conn | *RsocketConn
	// peerTakesRDMACM reports whether the peer said that it listens on
	// the RDMA connection manager too (so it is not a soft-only peer).
	peerTakesRDMACM() bool
	setFallback(fb error) // stats.go
	Close() error
}
