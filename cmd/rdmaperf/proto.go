package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/rdmanet/rdma/internal/perfreport"
)

// The control protocol. Every test connection starts with a fixed-size
// header from the client that says what to run; the server answers with a
// reply (ok, or an error text) and then runs the test on the same
// connection, so a server needs no configuration to serve any client run.
//
//	header (32 bytes, big endian):
//	  magic    [4]byte "RPRF"
//	  version  uint8   protoVersion
//	  kind     uint8   kindStream or kindLatency
//	  flags    uint16  flagBuffers; other bits must be 0
//	  size     uint32  message size, 1..maxMsgSize
//	  reserved uint32  must be 0
//	  duration int64   ns the client means to run (0: iteration count)
//	  iters    int64   messages the client means to send (0: duration)
//
//	reply: magic [4]byte, status uint8, pad uint8, len uint16, len bytes of text
//
// After the reply, a stream test is the client writing until CloseWrite; a
// latency test is the client writing size bytes and the server echoing them,
// until the client's CloseWrite. Either way the server then sends a
// serverResult (resultLen bytes: bytes received, ns from the first byte to
// EOF, ns of CPU its process used meanwhile) and closes.
const (
	protoVersion = 1
	headerLen    = 32
	replyLen     = 8
	resultLen    = 24
	maxReplyText = 1024

	kindStream  = 1
	kindLatency = 2

	statusOK  = 0
	statusErr = 1

	minMsgSize = 1
	maxMsgSize = 64 << 20

	// flagBuffers: both ends send and receive from rdma.Buffers
	// (registered memory: Writes and Reads of it take the zero-copy
	// paths; over TCP it is plain memory).
	flagBuffers = 1
)

var protoMagic = [4]byte{'R', 'P', 'R', 'F'}

// header is what a client asks a server to run on one connection.
type header struct {
	Kind     uint8
	Size     int
	Duration time.Duration
	Iters    int64
	Buffers  bool // flagBuffers
}

func kindName(k uint8) string {
	switch k {
	case kindStream:
		return perfreport.TestStream
	case kindLatency:
		return perfreport.TestLatency
	}
	return fmt.Sprintf("kind(%d)", k)
}

// errBadHeader marks a header the server cannot serve; its text goes back to
// the client.
var errBadHeader = errors.New("bad control header")

func (h *header) marshal(b *[headerLen]byte) {
	copy(b[0:4], protoMagic[:])
	b[4] = protoVersion
	b[5] = h.Kind
	var flags uint16
	if h.Buffers {
		flags |= flagBuffers
	}
	binary.BigEndian.PutUint16(b[6:8], flags)
	binary.BigEndian.PutUint32(b[8:12], uint32(h.Size))
	binary.BigEndian.PutUint32(b[12:16], 0)
	binary.BigEndian.PutUint64(b[16:24], uint64(h.Duration))
	binary.BigEndian.PutUint64(b[24:32], uint64(h.Iters))
}

// parseHeader decodes and validates a header; every error wraps errBadHeader
// and says what is wrong in words a user of the client can act on.
func parseHeader(b []byte) (header, error) {
	bad := func(format string, args ...any) (header, error) {
		return header{}, fmt.Errorf("%w: "+format, append([]any{errBadHeader}, args...)...)
	}
	if len(b) != headerLen {
		return bad("%d bytes, want %d", len(b), headerLen)
	}
	if [4]byte(b[0:4]) != protoMagic {
		return bad("magic %q is not rdmaperf's %q (is the peer an rdmaperf client?)", b[0:4], protoMagic[:])
	}
	if b[4] != protoVersion {
		return bad("client speaks protocol version %d, this server speaks %d", b[4], protoVersion)
	}
	h := header{Kind: b[5]}
	if h.Kind != kindStream && h.Kind != kindLatency {
		return bad("unknown test kind %d (want %d stream or %d latency)", h.Kind, kindStream, kindLatency)
	}
	f := binary.BigEndian.Uint16(b[6:8])
	if f&^flagBuffers != 0 {
		return bad("unknown flags %#x", f&^flagBuffers)
	}
	h.Buffers = f&flagBuffers != 0
	size := binary.BigEndian.Uint32(b[8:12])
	if size < minMsgSize || size > maxMsgSize {
		return bad("message size %d out of range [%d, %d]", size, minMsgSize, maxMsgSize)
	}
	h.Size = int(size)
	if r := binary.BigEndian.Uint32(b[12:16]); r != 0 {
		return bad("reserved field is %#x, want 0", r)
	}
	d := int64(binary.BigEndian.Uint64(b[16:24]))
	n := int64(binary.BigEndian.Uint64(b[24:32]))
	if d < 0 || n < 0 {
		return bad("negative duration %d or iteration count %d", d, n)
	}
	if d > int64(maxTestDuration) {
		return bad("duration %v longer than the server's limit %v", time.Duration(d), maxTestDuration)
	}
	h.Duration, h.Iters = time.Duration(d), n
	return h, nil
}

// maxTestDuration bounds how long one test may ask a server to run.
const maxTestDuration = 24 * time.Hour

// writeReply sends the server's answer to a header: ok (err == nil) or the
// error's text.
func writeReply(w io.Writer, err error) error {
	var b [replyLen + maxReplyText]byte
	copy(b[0:4], protoMagic[:])
	n := 0
	if err != nil {
		b[4] = statusErr
		n = copy(b[replyLen:], err.Error())
	}
	binary.BigEndian.PutUint16(b[6:8], uint16(n))
	_, werr := w.Write(b[:replyLen+n])
	return werr
}

// readReply reads the server's answer; a refusal comes back as an error
// carrying the server's text.
func readReply(r io.Reader) error {
	var b [replyLen + maxReplyText]byte
	if _, err := io.ReadFull(r, b[:replyLen]); err != nil {
		return fmt.Errorf("reading the server's reply: %w (is it an rdmaperf server?)", err)
	}
	if [4]byte(b[0:4]) != protoMagic {
		return fmt.Errorf("the server's reply starts with %q, not %q: it is not an rdmaperf server", b[0:4], protoMagic[:])
	}
	n := int(binary.BigEndian.Uint16(b[6:8]))
	if n > maxReplyText {
		return fmt.Errorf("the server's reply announces %d bytes of text, more than %d", n, maxReplyText)
	}
	if _, err := io.ReadFull(r, b[replyLen:replyLen+n]); err != nil {
		return fmt.Errorf("reading the server's reply: %w", err)
	}
	switch b[4] {
	case statusOK:
		return nil
	case statusErr:
		return fmt.Errorf("the server refused the test: %s", b[replyLen:replyLen+n])
	}
	return fmt.Errorf("the server's reply has unknown status %d", b[4])
}

// serverResult is what the server counted in a test.
type serverResult struct {
	Bytes   int64
	Elapsed time.Duration // first byte to EOF
	CPU     time.Duration // the server process's CPU time (user+system) over Elapsed
}

func (s serverResult) marshal(b *[resultLen]byte) {
	binary.BigEndian.PutUint64(b[0:8], uint64(s.Bytes))
	binary.BigEndian.PutUint64(b[8:16], uint64(s.Elapsed))
	binary.BigEndian.PutUint64(b[16:24], uint64(s.CPU))
}

func parseServerResult(b *[resultLen]byte) serverResult {
	return serverResult{
		Bytes:   int64(binary.BigEndian.Uint64(b[0:8])),
		Elapsed: time.Duration(binary.BigEndian.Uint64(b[8:16])),
		CPU:     time.Duration(binary.BigEndian.Uint64(b[16:24])),
	}
}
