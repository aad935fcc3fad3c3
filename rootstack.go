package rdma

import (
	"context"
	"net"
	"time"

	"github.com/rdmanet/rdma/internal/rootstack"
)

// The package as internal/conntest runs it (internal/rootstack): the
// suite lies below the package and so cannot import it.
func init() { rootstack.Set(suiteStack{}) }

type suiteStack struct{}

// stackConfig is cfg, an rdma.Config (nil: the zero one), as a pointer to a
// copy of its own.
func stackConfig(cfg any) *Config {
	c, _ := cfg.(Config)
	return &c
}

func (suiteStack) Tuning(cfg any) rootstack.Tuning {
	c := stackConfig(cfg)
	return rootstack.Tuning{
		Provider: c.Provider, Wire: c.Wire,
		RingSize: c.RingSize, SendBufferSize: c.SendBufferSize,
		RecvDepth: c.RecvDepth, SendDepth: c.SendDepth,
		RendezvousThreshold: c.RendezvousThreshold,
		KeepAlive:           c.KeepAlive, PeerTimeout: c.PeerTimeout,
	}
}

func (suiteStack) Tune(cfg any, t rootstack.Tuning) any {
	c := stackConfig(cfg)
	c.Provider, c.Wire = t.Provider, t.Wire
	c.RingSize, c.SendBufferSize = t.RingSize, t.SendBufferSize
	c.RecvDepth, c.SendDepth = t.RecvDepth, t.SendDepth
	c.RendezvousThreshold = t.RendezvousThreshold
	c.KeepAlive, c.PeerTimeout = t.KeepAlive, t.PeerTimeout
	return *c
}

func (suiteStack) Listen(ctx context.Context, cfg any, addr string) (net.Listener, error) {
	return (&ListenConfig{Config: stackConfig(cfg)}).Listen(ctx, Network, addr)
}

func (suiteStack) Dial(ctx context.Context, cfg any, addr string, timeout time.Duration) (net.Conn, error) {
	d := Dialer{Config: stackConfig(cfg), Timeout: timeout}
	return d.DialContext(ctx, Network, addr)
}

func (suiteStack) AllocBuffer(n int) (rootstack.Buffer, error) {
	b, err := AllocBuffer(n)
	if err != nil {
		return nil, err
	}
	return b, nil
}

func (suiteStack) Rendezvous(c net.Conn) (sent, windowed uint64, ok bool) {
	st, ok := c.(interface{ Stats() ConnStats })
	if !ok {
		return 0, 0, false
	}
	s := st.Stats()
	return s.RendezvousSent, s.RendezvousWindowed, true
}
