package rdma

import (
	"errors"
	"hash/crc32"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

func validHello() hello {
	return hello{version: protoVersion, recvDepth: 128, ringAddr: 0x7f0000001000, ringKey: 0x1234, ringLog: 20}
}

func TestHelloRoundTrip(t *testing.T) {
	h := validHello()
	b := h.marshal()
	require.Len(t, b, helloLen)
	assert.LessOrEqual(t, len(b), 56, "fits a connect's private data")
	got, err := parseHello(b)
	require.NoError(t, err)
	assert.Equal(t, h, got)
	// Trailing bytes (a later version's extension, or CM padding) are fine.
	got, err = parseHello(append(b, make([]byte, 20)...))
	require.NoError(t, err)
	assert.Equal(t, h, got)
}

func TestHelloRejects(t *testing.T) {
	good := validHello().marshal()
	mutate := map[string]func(b []byte) []byte{
		"short":     func(b []byte) []byte { return b[:helloLen-1] },
		"empty":     func(b []byte) []byte { return nil },
		"magic":     func(b []byte) []byte { b[0] = 'X'; return b },
		"checksum":  func(b []byte) []byte { b[16] ^= 1; return b },
		"version 0": func(b []byte) []byte { b[4] = 0; return resum(b) },
		"depth 0":   func(b []byte) []byte { b[6], b[7] = 0, 0; return resum(b) },
		"depth big": func(b []byte) []byte { b[6], b[7] = 0xff, 0xff; return resum(b) },
		"ring tiny": func(b []byte) []byte { b[20] = 5; return resum(b) },
		"ring huge": func(b []byte) []byte { b[20] = 40; return resum(b) },
		"addr 0":    func(b []byte) []byte { clear(b[8:16]); return resum(b) },
		"addr wrap": func(b []byte) []byte {
			for i := 8; i < 16; i++ {
				b[i] = 0xff
			}
			return resum(b)
		},
		"reserved": func(b []byte) []byte { b[22] = 1; return resum(b) },
	}
	for name, f := range mutate {
		t.Run(name, func(t *testing.T) {
			b := f(append([]byte(nil), good...))
			_, err := parseHello(b)
			assert.True(t, errors.Is(err, errHello), "%v", err)
		})
	}
	// A later version with reserved bytes in use is accepted: we answer v1.
	b := append([]byte(nil), good...)
	b[4], b[22] = 2, 1
	h, err := parseHello(resum(b))
	require.NoError(t, err)
	assert.Equal(t, uint8(2), h.version)
}

func resum(b []byte) []byte {
	sum := crc32.ChecksumIEEE(b[:28])
	b[28], b[29], b[30], b[31] = byte(sum), byte(sum>>8), byte(sum>>16), byte(sum>>24)
	return b
}

func TestReject(t *testing.T) {
	assert.Equal(t, byte(rejectBadHello), parseReject(marshalReject(rejectBadHello)))
	assert.Equal(t, byte(0), parseReject([]byte("garbage")))
	assert.Equal(t, byte(0), parseReject(nil))
	assert.LessOrEqual(t, rejectLen, 148)
}

func TestImm(t *testing.T) {
	assert.Equal(t, uint32(immKindData), immData(65536)>>immKindShift)
	c := immCredit(1023, creditBytesMax)
	assert.Equal(t, uint32(immKindCredit), c>>immKindShift)
	assert.Equal(t, uint32(1023), c>>creditRecvShift&creditRecvMax)
	assert.Equal(t, uint32(creditBytesMax), c&creditBytesMax)
	assert.Equal(t, uint32(immKindCtl), immCtl(ctlFin)>>immKindShift)
	// A whole ring's credit fits the field for every ring size.
	for log := uint8(minRingLog); log <= maxRingLog; log++ {
		assert.LessOrEqual(t, uint64(1)<<log>>creditShift(log), uint64(creditBytesMax), "ring 2^%d", log)
		assert.GreaterOrEqual(t, uint64(1)<<log>>creditShift(log)/4, uint64(1024), "ring 2^%d", log)
	}
}

func FuzzParseHello(f *testing.F) {
	f.Add(validHello().marshal())
	f.Add([]byte{})
	f.Add([]byte("RDGo"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseHello(b)
		if err != nil {
			return
		}
		// Whatever passes is within the limits the data path relies on.
		if h.recvDepth < minDepth || h.recvDepth > maxRecvDepth || h.ringLog < minRingLog || h.ringLog > maxRingLog || h.ringAddr == 0 {
			t.Fatalf("accepted out-of-range hello %+v", h)
		}
		again, err := parseHello(h.marshal())
		if err != nil || again.ringAddr != h.ringAddr || again.ringKey != h.ringKey {
			t.Fatalf("re-marshalled hello does not parse: %v", err)
		}
	})
}

// fuzzConn is a Conn with just the state recvLocked touches, no verbs.
func fuzzConn() *Conn {
	c := &Conn{ring: make([]byte, 1<<minRingLog), rqDepth: 16}
	c.ringMask, c.ringLog = uint64(len(c.ring)-1), minRingLog
	c.peer.size, c.peer.mask, c.peer.recvDepth = 1<<minRingLog, 1<<minRingLog-1, 16
	c.msgCredits = 16
	return c
}

// FuzzRecv feeds arbitrary completions (as a peer could cause them) to the
// receive path: it never panics, and whatever it accepts keeps the windows
// within what was granted.
func FuzzRecv(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0x40, 0, 0, 0, 0x40, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0x81, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		c := fuzzConn()
		c.sndTail = 3000 // pretend we sent this much, so credits have something to cover
		c.msgCredits = 10
		for len(b) >= 10 {
			wc := verbs.WC{
				Opcode:  verbs.WCRecvRDMAWithImm,
				Flags:   verbs.WCWithImm,
				Imm:     uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24,
				ByteLen: uint32(b[4]) | uint32(b[5])<<8 | uint32(b[6])<<16 | uint32(b[7])<<24,
			}
			if b[8]&1 != 0 {
				wc.Opcode = verbs.WCRecv
			}
			if b[8]&2 != 0 {
				wc.Flags = 0
			}
			consume := b[9]
			b = b[10:]
			var snd bool
			if err := c.recvLocked(&wc, &snd); err != nil {
				return // a failed conn takes no more
			}
			if c.rcvTail-c.rcvCredited > uint64(len(c.ring)) || c.msgCredits > c.peer.recvDepth || c.sndAcked > c.sndTail {
				t.Fatalf("window broken: tail %d credited %d credits %d acked %d", c.rcvTail, c.rcvCredited, c.msgCredits, c.sndAcked)
			}
			// The reader consumes some, and credit is returned.
			n := min(uint64(consume)*16, c.rcvTail-c.rcvHead)
			c.rcvHead += n
			c.rcvCredited = c.rcvHead
		}
	})
}
