package rdma

import (
	"math/rand"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/provider"
	"github.com/rdmanet/rdma/verbs"
)

// spaceProvider is a test-only provider that stands in for rdmacore on a
// host with a device: the soft provider's verbs, but with a port space of
// its own, as the RDMA connection manager's is separate from TCP's. A port
// bound in it is carried by a soft listener on a hidden TCP port, so the
// same port number is free on TCP for the real soft side of a mixed
// listener. A dial to a port nobody bound in it is refused as IB and RoCE
// refuse it (REJECTED, no listener); a port marked silent swallows the
// connect (a TCP listener that never answers), as a host without RDMA does.
type spaceProvider struct {
	soft verbs.Provider

	mu     sync.Mutex
	ports  map[int]*spaceID // port in this space -> the ID bound to it
	silent map[int]bool     // ports whose connects are never answered
	force  []int            // ports handed out first for port 0 (tests of collisions)
	ids    sync.Map         // inner verbs.CMID -> *spaceID

	silentAddr *net.TCPAddr // a TCP listener that accepts and never answers
	deadAddr   *net.TCPAddr // a TCP port nothing listens on
}

const spaceName = "spacetest"

var (
	spaceOnce sync.Once
	space     *spaceProvider
)

// useSpaceProvider registers the provider (once per process), makes it the
// one auto prefers for the test, and returns it.
func useSpaceProvider(t *testing.T) *spaceProvider {
	t.Helper()
	spaceOnce.Do(func() {
		soft, err := verbs.Lookup(ProviderSoft)
		require.NoError(t, err)
		space = &spaceProvider{soft: soft}
		verbs.Register(space)
	})
	space.mu.Lock()
	space.ports = map[int]*spaceID{}
	space.silent = map[int]bool{}
	space.force = nil
	space.mu.Unlock()

	// A listener that never answers: connections sit in its accept queue
	// until it closes.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var held []net.Conn
	var hmu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			hmu.Lock()
			held = append(held, c)
			hmu.Unlock()
		}
	}()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	space.silentAddr = silent.Addr().(*net.TCPAddr)
	space.deadAddr = dead.Addr().(*net.TCPAddr)
	dead.Close()

	prev := provider.Hardware
	provider.Hardware = spaceName
	t.Setenv(ProviderEnv, "") // auto, whatever the environment says
	t.Cleanup(func() {
		provider.Hardware = prev
		silent.Close()
		<-done
		for _, c := range held {
			c.Close()
		}
	})
	require.True(t, provider.HasActiveDevice(space), "the soft device behind %s has no active port", spaceName)
	return space
}

func (p *spaceProvider) setSilent(port int, on bool) {
	p.mu.Lock()
	p.silent[port] = on
	p.mu.Unlock()
}

func (p *spaceProvider) Name() string                            { return spaceName }
func (p *spaceProvider) Devices() ([]verbs.DeviceInfo, error)    { return p.soft.Devices() }
func (p *spaceProvider) Open(name string) (verbs.Context, error) { return p.soft.Open(name) }

func (p *spaceProvider) CreateEventChannel() (verbs.EventChannel, error) {
	ech, err := p.soft.CreateEventChannel()
	if err != nil {
		return nil, err
	}
	return &spaceChannel{p: p, inner: ech}, nil
}

func (p *spaceProvider) wrap(inner verbs.CMID) *spaceID {
	if v, ok := p.ids.Load(inner); ok {
		return v.(*spaceID)
	}
	v, _ := p.ids.LoadOrStore(inner, &spaceID{p: p, inner: inner})
	return v.(*spaceID)
}

type spaceChannel struct {
	p     *spaceProvider
	inner verbs.EventChannel
}

func (e *spaceChannel) CreateID() (verbs.CMID, error) {
	id, err := e.inner.CreateID()
	if err != nil {
		return nil, err
	}
	return e.p.wrap(id), nil
}

func (e *spaceChannel) GetEvent(deadline time.Time) (verbs.CMEvent, error) {
	ev, err := e.inner.GetEvent(deadline)
	if ev.ID != nil {
		ev.ID = e.p.wrap(ev.ID)
	}
	if ev.Listen != nil {
		ev.Listen = e.p.wrap(ev.Listen)
	}
	return ev, err
}

func (e *spaceChannel) Close() error { return e.inner.Close() }

type spaceID struct {
	p      *spaceProvider
	inner  verbs.CMID
	port   int          // bound port in the space, 0 if none
	remote *net.TCPAddr // the address dialed, in the space
}

func (id *spaceID) BindAddr(a *net.TCPAddr) error {
	p := id.p
	p.mu.Lock()
	port := a.Port
	switch {
	case port == 0 && len(p.force) > 0:
		port, p.force = p.force[0], p.force[1:]
	case port == 0:
		for port == 0 || p.ports[port] != nil {
			port = 20000 + rand.Intn(20000)
		}
	case p.ports[port] != nil:
		p.mu.Unlock()
		return verbs.Errorf("rdma_bind_addr", syscall.EADDRINUSE, "port %d in use in %s's port space", port, spaceName)
	}
	p.ports[port] = id
	p.mu.Unlock()
	real := *a
	real.Port = 0
	if err := id.inner.BindAddr(&real); err != nil {
		p.mu.Lock()
		delete(p.ports, port)
		p.mu.Unlock()
		return err
	}
	id.port = port
	return nil
}

func (id *spaceID) Listen(backlog int) error { return id.inner.Listen(backlog) }

func (id *spaceID) ResolveAddr(src, dst *net.TCPAddr, timeout time.Duration) error {
	p := id.p
	p.mu.Lock()
	bound := p.ports[dst.Port]
	silent := p.silent[dst.Port]
	p.mu.Unlock()
	real := 0
	if bound != nil {
		if a := bound.inner.LocalAddr(); a != nil {
			real = a.Port // known once the soft listener listens
		}
	}
	r := *dst
	switch {
	case silent:
		r.Port = p.silentAddr.Port
	case real > 0:
		r.Port = real
	default:
		r.Port = p.deadAddr.Port
	}
	d := *dst
	id.remote = &d
	return id.inner.ResolveAddr(src, &r, timeout)
}

func (id *spaceID) ResolveRoute(timeout time.Duration) error { return id.inner.ResolveRoute(timeout) }
func (id *spaceID) Context() verbs.Context                   { return id.inner.Context() }
func (id *spaceID) CreateQP(pd verbs.PD, attr *verbs.QPInitAttr) (verbs.QP, error) {
	return id.inner.CreateQP(pd, attr)
}
func (id *spaceID) QP() verbs.QP                         { return id.inner.QP() }
func (id *spaceID) Connect(param *verbs.ConnParam) error { return id.inner.Connect(param) }
func (id *spaceID) SetAckTimeout(exp int) error          { return id.inner.SetAckTimeout(exp) }
func (id *spaceID) SetTOS(tos int) error                 { return id.inner.SetTOS(tos) }
func (id *spaceID) Accept(param *verbs.ConnParam) error  { return id.inner.Accept(param) }
func (id *spaceID) Reject(privateData []byte) error      { return id.inner.Reject(privateData) }
func (id *spaceID) Disconnect() error                    { return id.inner.Disconnect() }
func (id *spaceID) Migrate(ch verbs.EventChannel) error {
	return id.inner.Migrate(ch.(*spaceChannel).inner)
}

func (id *spaceID) LocalAddr() *net.TCPAddr {
	a := id.inner.LocalAddr()
	if a == nil {
		return nil
	}
	b := *a
	if id.port != 0 {
		b.Port = id.port
		return &b
	}
	// An accepted ID: report the port of the space its listener is bound to.
	id.p.mu.Lock()
	defer id.p.mu.Unlock()
	for vp, bid := range id.p.ports {
		if la := bid.inner.LocalAddr(); la != nil && la.Port == a.Port {
			b.Port = vp
		}
	}
	return &b
}

func (id *spaceID) RemoteAddr() *net.TCPAddr {
	if id.remote != nil {
		r := *id.remote
		return &r
	}
	return id.inner.RemoteAddr()
}

func (id *spaceID) Destroy() error {
	err := id.inner.Destroy()
	p := id.p
	if id.port != 0 {
		p.mu.Lock()
		delete(p.ports, id.port)
		p.mu.Unlock()
		id.port = 0
	}
	p.ids.Delete(id.inner)
	return err
}
