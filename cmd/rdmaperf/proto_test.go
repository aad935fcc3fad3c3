package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func goodHeader() [headerLen]byte {
	var b [headerLen]byte
	h := header{Kind: kindLatency, Size: 64, Duration: 2 * time.Second}
	h.marshal(&b)
	return b
}

func TestHeaderRoundTrip(t *testing.T) {
	for _, h := range []header{
		{Kind: kindStream, Size: 64 << 10, Duration: 2 * time.Second},
		{Kind: kindLatency, Size: 1, Iters: 1000},
		{Kind: kindStream, Size: 1 << 20, Duration: time.Second, Buffers: true},
		{Kind: kindLatency, Size: maxMsgSize, Duration: maxTestDuration},
	} {
		var b [headerLen]byte
		h.marshal(&b)
		got, err := parseHeader(b[:])
		require.NoError(t, err)
		assert.Equal(t, h, got)
	}
}

func TestParseHeaderErrors(t *testing.T) {
	mod := func(f func(b []byte)) []byte {
		b := goodHeader()
		f(b[:])
		return b[:]
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"short", make([]byte, 10), "10 bytes, want 32"},
		{"http", []byte("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"[:headerLen]), "is not rdmaperf's"},
		{"version", mod(func(b []byte) { b[4] = 9 }), "protocol version 9"},
		{"kind", mod(func(b []byte) { b[5] = 7 }), "unknown test kind 7"},
		{"flags", mod(func(b []byte) { b[7] = 2 }), "unknown flags"},
		{"size0", mod(func(b []byte) { binary.BigEndian.PutUint32(b[8:], 0) }), "message size 0 out of range"},
		{"size big", mod(func(b []byte) { binary.BigEndian.PutUint32(b[8:], maxMsgSize+1) }), "out of range"},
		{"reserved", mod(func(b []byte) { b[15] = 1 }), "reserved"},
		{"negative", mod(func(b []byte) { binary.BigEndian.PutUint64(b[16:], 1<<63) }), "negative"},
		{"too long", mod(func(b []byte) { binary.BigEndian.PutUint64(b[16:], uint64(maxTestDuration)+1) }), "longer than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseHeader(tc.b)
			require.ErrorIs(t, err, errBadHeader)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestReply(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, writeReply(&buf, nil))
	require.NoError(t, readReply(&buf))

	buf.Reset()
	require.NoError(t, writeReply(&buf, errors.New("size out of range")))
	err := readReply(&buf)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the server refused the test: size out of range")

	// An overlong error text is cut, not a broken reply.
	buf.Reset()
	require.NoError(t, writeReply(&buf, errors.New(strings.Repeat("x", 5000))))
	err = readReply(&buf)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "refused")
	assert.Zero(t, buf.Len())

	for _, tc := range []struct {
		in, want string
	}{
		{"", "is it an rdmaperf server?"},
		{"HTTP/1.1 400 Bad Request\r\n", "not an rdmaperf server"},
		{"RPRF\x00\x00\xff\xff", "more than 1024"},
		{"RPRF\x07\x00\x00\x00", "unknown status 7"},
		{"RPRF\x01\x00\x00\x10abc", "reading the server's reply"},
	} {
		err := readReply(strings.NewReader(tc.in))
		require.Error(t, err, "%q", tc.in)
		assert.Contains(t, err.Error(), tc.want, "%q", tc.in)
	}
}

func TestServerResult(t *testing.T) {
	var b [resultLen]byte
	r := serverResult{Bytes: 123456789, Elapsed: 1500 * time.Millisecond, CPU: 2 * time.Second}
	r.marshal(&b)
	assert.Equal(t, r, parseServerResult(&b))
}

// FuzzParseHeader: whatever arrives at a server's port, parseHeader returns
// a header that round-trips or an error, never a panic.
func FuzzParseHeader(f *testing.F) {
	g := goodHeader()
	f.Add(g[:])
	f.Add([]byte("GET / HTTP/1.1\r\n"))
	f.Add(make([]byte, headerLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseHeader(b)
		if err != nil {
			if !errors.Is(err, errBadHeader) {
				t.Fatalf("error %v does not wrap errBadHeader", err)
			}
			return
		}
		var out [headerLen]byte
		h.marshal(&out)
		if !bytes.Equal(out[:], b) {
			t.Fatalf("accepted % x, re-encodes as % x", b, out)
		}
	})
}

// FuzzReadReply: whatever a peer answers, readReply returns, never panics.
func FuzzReadReply(f *testing.F) {
	var ok bytes.Buffer
	writeReply(&ok, nil)
	f.Add(ok.Bytes())
	var bad bytes.Buffer
	writeReply(&bad, errors.New("no"))
	f.Add(bad.Bytes())
	f.Add([]byte("RPRF\x01\x00\xff\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = readReply(bytes.NewReader(b))
	})
}
