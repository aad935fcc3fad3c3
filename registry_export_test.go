package rdma

import "fmt"

// RegisterFakeConns enters n registry entries without connections behind
// them (each says Provider "fake" and a made-up address pair) and returns
// a func that takes them out again.
func RegisterFakeConns(n int) (remove func()) {
	fakes := make([]*fakeConn, n)
	for i := range fakes {
		fakes[i] = &fakeConn{n: i}
		register(fakes[i])
	}
	return func() {
		for _, f := range fakes {
			unregister(f)
		}
	}
}

// fakeAddrs is a fake conn's address pair, by its number.
func fakeAddrs(n int) (local, remote string) {
	return "127.0.0.1:7471", fmt.Sprintf("127.0.0.2:%d", 10000+n)
}
