package conntest

import (
	"net"
	"sync"

	"github.com/rdmanet/rdma/internal/rootstack"
)

// bufConn runs a conn's Writes from and Reads into rdma.Buffers, so that
// the suite's traffic takes the zero-copy paths (Config.Buffers): every
// Write copies the caller's bytes into a Buffer of the conn's and writes
// from there, every Read reads into one and copies out. The copies are the
// test's; what the suite checks is the conn's behaviour on those paths.
type bufConn struct {
	Conn
	stack    rootstack.Stack
	rmu, wmu sync.Mutex
	rbuf     rootstack.Buffer
	wbuf     rootstack.Buffer
	close    sync.Once
	freed    bool // Close freed the Buffers: later calls go to the conn as they are
}

// wrap makes c a bufConn when the configuration asks for Buffers.
func (s *suite) wrap(c Conn) Conn {
	if !s.cfg.Buffers {
		return c
	}
	return &bufConn{Conn: c, stack: s.stack}
}

// unwrap is the conn under a bufConn.
func unwrap(c net.Conn) net.Conn {
	if b, ok := c.(*bufConn); ok {
		return b.Conn
	}
	return c
}

// grow makes *b hold at least n bytes.
func (c *bufConn) grow(b *rootstack.Buffer, n int) ([]byte, error) {
	if *b != nil && len((*b).Bytes()) >= n {
		return (*b).Bytes()[:n], nil
	}
	if *b != nil {
		if err := (*b).Free(); err != nil {
			return nil, err
		}
		*b = nil
	}
	nb, err := c.stack.AllocBuffer(max(n, 64<<10))
	if err != nil {
		return nil, err
	}
	*b = nb
	return nb.Bytes()[:n], nil
}

func (c *bufConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.freed {
		return c.Conn.Write(p)
	}
	buf, err := c.grow(&c.wbuf, len(p))
	if err != nil {
		return 0, err
	}
	copy(buf, p)
	return c.Conn.Write(buf)
}

func (c *bufConn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.freed {
		return c.Conn.Read(p)
	}
	buf, err := c.grow(&c.rbuf, len(p))
	if err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(buf)
	copy(p, buf[:n])
	return n, err
}

// Close closes the conn, then frees the Buffers once the Reads and Writes
// it unblocked have returned.
func (c *bufConn) Close() error {
	err := c.Conn.Close()
	c.close.Do(func() {
		c.rmu.Lock()
		c.wmu.Lock()
		defer c.rmu.Unlock()
		defer c.wmu.Unlock()
		for _, b := range []rootstack.Buffer{c.rbuf, c.wbuf} {
			if b != nil {
				b.Free()
			}
		}
		c.rbuf, c.wbuf, c.freed = nil, nil, true
	})
	return err
}
