package capi

import (
	"fmt"
)

// SetTrafficClass sets the traffic class (IP type of service, 0..255; the
// DSCP is its top six bits) of the context's connections made from now on:
// the connections ConnectPeer and ReconnectPeer dial, and those a server
// accepts. It reaches the wire as rdma.Config.TrafficClass does: the QP's
// traffic class on rdmacore (on RoCE an accepted connection's follows its
// dialer's), the TCP socket's IP_TOS on soft. Connections already made keep
// theirs. 0 is the system's default.
func (c *Context) SetTrafficClass(tc int) error {
	if tc < 0 || tc > 255 {
		return fmt.Errorf("capi: set traffic class: %w: %d is not in 0..255", ErrInvalidArgument, tc)
	}
	if c.tr.setTrafficClass == nil {
		return fmt.Errorf("capi: set traffic class: %w (transport %s)", ErrNotSupported, c.tr.name)
	}
	if c.peers.isClosed() {
		return fmt.Errorf("capi: set traffic class: %w", ErrClosed)
	}
	if c.ln != nil {
		if err := c.tr.setTrafficClass(c.ln, tc); err != nil {
			return fmt.Errorf("capi: set traffic class: %w", err)
		}
	}
	c.trafficClass.Store(int32(tc))
	return nil
}

// TrafficClass reports the traffic class of peer idx's connection as it
// reached the wire (read back from the queue pair, or soft's socket), or
// with idx -1 the context's setting for new connections.
func (c *Context) TrafficClass(idx int) (int, error) {
	const op = "traffic class of"
	if idx == -1 {
		if c.peers.isClosed() {
			return -1, fmt.Errorf("capi: %s: %w", op, ErrClosed)
		}
		return int(c.trafficClass.Load()), nil
	}
	p, err := c.peers.live(op, idx)
	if err != nil {
		return -1, err
	}
	tcc, ok := p.conn.(interface{ TrafficClass() (int, error) })
	if !ok {
		return -1, fmt.Errorf("capi: %s peer %d: %w", op, idx, ErrNotSupported)
	}
	tc, err := tcc.TrafficClass()
	if err != nil {
		return -1, fmt.Errorf("capi: %s peer %d: %w", op, idx, err)
	}
	return tc, nil
}
