package rdma

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/rdmanet/rdma/internal/rsocket"
	"github.com/rdmanet/rdma/internal/rsocketconn"
	"github.com/rdmanet/rdma/verbs"
)

// Wire protocols (Config.Wire).
const (
	WireRDMA    = "rdma"    // this package's own protocol (the default)
	WireRsocket = "rsocket" // rdma-core's rsockets: C programs on librdmacm's rsocket API
	// WireEnv is the environment variable read when Config.Wire is empty.
	WireEnv = "RDMA_WIRE"
)

// wireOf resolves the wire protocol a Config asks for.
func wireOf(c *Config) (string, error) {
	w, source := "", "Config.Wire"
	if c != nil {
		w = c.Wire
	}
	if w == "" {
		w, source = os.Getenv(WireEnv), WireEnv
	}
	switch w {
	case "", WireRDMA:
		return WireRDMA, nil
	case WireRsocket:
		return WireRsocket, nil
	}
	return "", fmt.Errorf("rdma: %s=%q: unknown wire protocol (want %q or %q)", source, w, WireRDMA, WireRsocket)
}

// rsocketParams are a connection's sizes in rsocket mode
// (rsocketconn.Params): rsocket.c's defaults (rbuf and send buffer 128
// KiB, 384-deep queues, 64 bytes inline) unless the Config sets them.
func rsocketParams(c *Config) rsocketconn.Params {
	var r Config
	if c != nil {
		r = *c
	}
	d := r.withDefaults()                                       // keep-alive and timeouts as in the default mode
	poll := &Config{PollTime: d.PollTime, BusyPoll: d.BusyPoll} // as rdma.Conn takes them
	p := rsocketconn.Params{
		RbufSize:         pow2Clamp(positive(r.RingSize, rsocket.DefaultRecvBuf), rsocket.MinBuf, rsocket.MaxBuf),
		SbufSize:         pow2Clamp(positive(r.SendBufferSize, rsocket.DefaultSendBuf), rsocket.MinBuf, rsocket.MaxBuf),
		SQSize:           clamp(positive(r.SendDepth, rsocket.DefaultQueue), rsocket.MinQueue, rsocket.MaxQueue),
		RQSize:           clamp(positive(r.RecvDepth, rsocket.DefaultQueue), rsocket.MinQueue, rsocket.MaxQueue),
		Inline:           rsocket.DefaultInline,
		KeepAlive:        d.KeepAlive,
		HandshakeTimeout: d.HandshakeTimeout,
		PollTime:         poll.pollTime(),
		BusyPoll:         poll.busyPoll,
		TrafficClass:     d.TrafficClass,
		Addr:             func(a *net.TCPAddr) net.Addr { return fromTCPAddr(a).netAddr() },
	}
	switch {
	case r.InlineThreshold < 0:
		p.Inline = 0
	case r.InlineThreshold > 0:
		p.Inline = min(r.InlineThreshold, 1024)
	}
	return p
}

// connectRsocket is the dial of a connection of sizes p as rsocket.c's
// rs_do_connect runs it: resolve, create the endpoint, connect with
// rs_conn_data as private data, take the peer's from the accept.
func connectRsocket(p rsocketconn.Params) connectFunc[*RsocketConn] {
	return func(ctx context.Context, prov verbs.Provider, src, dst *net.TCPAddr, _ Config) (*RsocketConn, error) {
		return connectSteps(ctx, prov, src, dst, p.TrafficClass, func(ech verbs.EventChannel, id verbs.CMID) (*RsocketConn, *verbs.ConnParam, error) {
			c, err := newRsocketConn(prov.Name(), ech, id, p)
			if err != nil {
				return nil, nil, err
			}
			return c, &verbs.ConnParam{PrivateData: c.c.ConnData(), RetryCount: 7, RNRRetryCount: 7}, nil
		})
	}
}

// newRsListen returns a Listener's rsocket sizes, or nil unless c asks
// for rsocket mode.
func newRsListen(c *Config) (*rsocketconn.Params, error) {
	w, err := wireOf(c)
	if err != nil || w != WireRsocket {
		return nil, err
	}
	p := rsocketParams(c)
	return &p, nil
}

var errAcceptRsocket = errors.New("rdma: the listener speaks rsocket (Config.Wire): use Accept, whose conns are *RsocketConn")

// handshakeRsocket is rsocket.c's rs_accept for one connection request: a
// request whose private data is not rs_conn_data version 1 is rejected
// without private data, as rsocket.c does.
func (l *Listener) handshakeRsocket(prov verbs.Provider, ev verbs.CMEvent) {
	peer, err := rsocket.ParseConnData(ev.Param.PrivateData)
	if err != nil {
		refuse(ev.ID, nil)
		return
	}
	l.accept(prov, ev.ID, nil, func(ech verbs.EventChannel) (establishing, *verbs.ConnParam, error) {
		c, err := newRsocketConn(prov.Name(), ech, ev.ID, *l.rs)
		if err != nil {
			return nil, nil, err
		}
		c.c.SetPeer(peer)
		return c, &verbs.ConnParam{PrivateData: c.c.ConnData(), RetryCount: 7, RNRRetryCount: 7}, nil
	})
}
