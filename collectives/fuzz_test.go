package collectives

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"
)

// A peer's byte stream, whatever it holds, makes an operation succeed or
// fail with an error: never a panic, a hang or an out-of-range access.
func FuzzPeerStream(f *testing.F) {
	valid := func(h header, payload []byte) []byte {
		b := make([]byte, hdrLen+len(payload))
		h.len = uint32(len(payload))
		h.put(b)
		copy(b[hdrLen:], payload)
		return b
	}
	f.Add([]byte{})
	f.Add(valid(header{seq: 1, kind: kindBarrier}, nil))
	f.Add(valid(header{seq: 1, kind: kindAllReduce, arg: typeArg[float64](Sum)}, make([]byte, 16)))
	f.Add(valid(header{kind: kindAbort, root: 1}, []byte("boom")))
	f.Add(valid(header{kind: kindAbort, root: 65535}, make([]byte, 300)))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		a, b := net.Pipe()
		g, err := NewGroup(0, []net.Conn{nil, a})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		go func() { _, _ = io.Copy(io.Discard, b) }()
		go func() {
			_, _ = b.Write(stream)
			_ = b.Close()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if len(stream) > 0 && stream[0]%2 == 0 {
			_ = g.Barrier(ctx)
		} else {
			v := []float64{1, 2}
			_ = AllReduce(ctx, g, v, v, Sum)
		}
		if ctx.Err() != nil {
			t.Fatal("the operation hung until its context expired")
		}
	})
}

// Bootstrap messages are parsed without panics or unbounded allocation.
func FuzzBootstrapMessages(f *testing.F) {
	hello := appendHeader(nil, msgHello)
	hello = binary.LittleEndian.AppendUint32(hello, 1)
	hello = binary.LittleEndian.AppendUint32(hello, 4)
	hello = append(hello, 9)
	hello = append(hello, "127.0.0.1:1"...)
	f.Add(hello)
	table := appendHeader(nil, msgTable)
	table = binary.LittleEndian.AppendUint32(table, 4)
	table = append(table, make([]byte, 8)...)
	for i := 0; i < 3; i++ {
		table = append(table, 3, 'a', ':', '1')
	}
	f.Add(table)
	mesh := appendHeader(nil, msgMesh)
	mesh = binary.LittleEndian.AppendUint32(mesh, 2)
	mesh = binary.LittleEndian.AppendUint32(mesh, 4)
	mesh = append(mesh, make([]byte, 8)...)
	f.Add(mesh)
	f.Add([]byte("RDCJ\x01"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		if r, _, err := readHello(bytes.NewReader(msg), 4); err == nil && (r < 1 || r >= 4) {
			t.Fatalf("hello accepted rank %d of 4", r)
		}
		if _, addrs, err := readTable(bytes.NewReader(msg), 4); err == nil && len(addrs) != 4 {
			t.Fatalf("table with %d addresses", len(addrs))
		}
		_, _ = readMesh(bytes.NewReader(msg), 4, [8]byte{})
	})
}
