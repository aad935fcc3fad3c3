package collectives

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/rdmanet/rdma"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// One host holds at most perHost places, all hosts at most max; a
// newcomer takes the place of the oldest (of its host, when its host is
// full) only once that one has been held for after.
func TestPlacesBounds(t *testing.T) {
	const after = time.Second
	ps := newPlaces(5, 2, after)
	a, b, c := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")
	t0 := time.Unix(1000, 0)

	a1, v := ps.admit(a, t0)
	require.NotNil(t, a1)
	require.Nil(t, v)
	a2, _ := ps.admit(a, t0.Add(time.Millisecond))
	require.NotNil(t, a2)
	p, v := ps.admit(a, t0.Add(2*time.Millisecond))
	assert.Nil(t, p, "a third place for host a")
	assert.Nil(t, v)

	// Another host is not held up by a's.
	b1, _ := ps.admit(b, t0.Add(3*time.Millisecond))
	require.NotNil(t, b1)
	b2, _ := ps.admit(b, t0.Add(4*time.Millisecond))
	require.NotNil(t, b2)
	wake, _ := ps.room(t0.Add(4 * time.Millisecond))
	assert.Nil(t, wake, "a place is free")
	c1, _ := ps.admit(c, t0.Add(5*time.Millisecond))
	require.NotNil(t, c1)

	// All five held, none for long: no room until the oldest has been
	// held for after, or a place is given back.
	wake, in := ps.room(t0.Add(500 * time.Millisecond))
	require.NotNil(t, wake)
	assert.Equal(t, 500*time.Millisecond, in)
	select {
	case <-wake:
		t.Fatal("woken with no place given back")
	default:
	}

	// a's newcomer, a second on, takes a1's place (a's oldest).
	a3, v := ps.admit(a, t0.Add(after))
	require.NotNil(t, a3)
	assert.Same(t, a1, v)
	assert.False(t, ps.leave(a1), "a1 lost its place")
	assert.Equal(t, 2, ps.byHost[a])
	assert.Len(t, ps.held, 5)

	// With every place held, a newcomer of a host below its bound takes the
	// oldest place of any host, once held for after.
	d := netip.MustParseAddr("10.0.0.4")
	wake, _ = ps.room(t0.Add(after + time.Millisecond))
	assert.Nil(t, wake, "a2 has been held for a second")
	d1, v := ps.admit(d, t0.Add(after+time.Millisecond))
	require.NotNil(t, d1)
	assert.Same(t, a2, v)
	_, in = ps.room(t0.Add(after + time.Millisecond))
	assert.Equal(t, 2*time.Millisecond, in, "b1 is next, held since 3 ms")

	// A handshake that ends gives its place back, once, and wakes whoever
	// waits for one.
	wake, _ = ps.room(t0.Add(after + time.Millisecond))
	require.NotNil(t, wake)
	assert.True(t, ps.leave(b2))
	assert.True(t, ps.leave(b2))
	select {
	case <-wake:
	default:
		t.Fatal("a place given back woke nobody")
	}
	assert.Equal(t, 1, ps.byHost[b])
	assert.Len(t, ps.held, 4)
	wake, _ = ps.room(t0.Add(after + time.Millisecond))
	assert.Nil(t, wake)
}

func TestRemoteHost(t *testing.T) {
	tcp := func(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }
	for _, c := range []struct {
		addr net.Addr
		want string
	}{
		{tcp("192.0.2.7:4000"), "192.0.2.7"},
		{tcp("[::ffff:192.0.2.7]:4000"), "192.0.2.7"},
		{tcp("[2001:db8:1:2:3:4:5:6]:4000"), "2001:db8:1:2::"},
		{tcp("[2001:db8:1:2:ffff::1]:4000"), "2001:db8:1:2::"},
		{&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 1, Zone: "eth0"}, "fe80::"},
		{&rdma.Addr{IP: net.ParseIP("192.0.2.8"), Port: 1}, "192.0.2.8"},
		{&net.UnixAddr{Name: "@x", Net: "unix"}, "invalid IP"},
		{nil, "invalid IP"},
	} {
		assert.Equal(t, c.want, remoteHost(c.addr).String(), "%v", c.addr)
	}
}

// A bootstrap listener with places for 4 handshakes, 2 per host, taken
// over after a second: a host's conns beyond its bound are told it is
// busy, another host's are heard at once, and once every place is held the
// listener accepts the next conn when a place has been held a second,
// which the conn then takes, telling its holder it is busy.
func TestAcceptorBounds(t *testing.T) {
	const after = time.Second
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	secret := []byte("s")
	acc := startAcceptorPlaces(ln, time.Time{}, func(c net.Conn) (arrival, error) {
		return rootHandshake(c, newProver(secret), 4)
	}, newPlaces(4, 2, after))
	defer acc.stop()
	addr := ln.Addr().String()
	dial := func(local string) net.Conn {
		t.Helper()
		c, err := tcpTransport.dial(context.Background(), local, addr)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		return c
	}
	challenged := func(c net.Conn) nonce {
		t.Helper()
		n, err := readChallenge(c)
		require.NoError(t, err)
		return n
	}

	start := time.Now()
	a1 := dial("127.0.0.2")
	challenged(a1)
	a2 := dial("127.0.0.2")
	challenged(a2)
	_, err = readChallenge(dial("127.0.0.2"))
	require.ErrorIs(t, err, errBusy, "a third conn of host .2")
	b1 := dial("127.0.0.3")
	challenged(b1)
	b2 := dial("127.0.0.3")
	challenged(b2)
	require.Less(t, time.Since(start), after, "too slow a machine for this test")

	// Every place held: host .4's conn waits until a1's has been held for
	// after, takes it, and a1 is told.
	c1 := dial("127.0.0.4")
	ch := challenged(c1)
	assert.GreaterOrEqual(t, time.Since(start), after)
	_, err = readHeaderBoot(a1, msgTable, true)
	assert.ErrorIs(t, err, errBusy, "a1 lost its place")

	// c1 proves the secret and comes out of arrivals.
	var mine nonce
	_, err = c1.Write(appendHello(nil, newProver(secret), ch, 2, 4, "127.0.0.4:1", mine))
	require.NoError(t, err)
	select {
	case arr := <-acc.arrivals:
		acc.take(arr)
		defer arr.conn.Close()
		assert.Equal(t, 2, arr.rank)
	case <-time.After(10 * time.Second):
		t.Fatal("c1's hello did not arrive")
	}
	// A silent conn whose hello timeout has not passed keeps its place
	// while no newcomer needs it.
	_ = a2.SetReadDeadline(time.Now().Add(after / 4))
	_, err = readHeaderBoot(a2, msgTable, true)
	var ne net.Error
	require.ErrorAs(t, err, &ne, "a2 was told something: %v", err)
	assert.True(t, ne.Timeout())
}

// More ranks on one host than its places at the root and at each rank's
// listener: those beyond are told the listener is busy, and dial again.
func TestJoinManyRanksOneHost(t *testing.T) {
	n := maxHandshakesPerHost + 8
	gs := joinAll(t, n, func(ctx context.Context, rank int, root string) (*Group, error) {
		b := Bootstrap{TCP: true}
		return b.Join(ctx, rank, n, root)
	})
	checkGroup(t, gs)
}
