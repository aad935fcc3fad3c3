package stream

import (
	"errors"
	"hash/crc32"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func validHello() Hello {
	return Hello{Version: Version, RecvDepth: 128, RingAddr: 0x7f0000001000, RingKey: 0x1234, RingLog: 20, GrowLog: 22, Heartbeat: 2000}
}

func TestHelloRoundTrip(t *testing.T) {
	h := validHello()
	b := h.Marshal()
	require.Len(t, b, HelloLen)
	assert.LessOrEqual(t, len(b), 56, "fits a connect's private data")
	got, err := ParseHello(b)
	require.NoError(t, err)
	assert.Equal(t, h, got)
	// Trailing bytes (a later version's extension, or CM padding) are fine.
	got, err = ParseHello(append(b, make([]byte, 20)...))
	require.NoError(t, err)
	assert.Equal(t, h, got)
}

func TestHelloGolden(t *testing.T) {
	b := validHello().Marshal()
	assert.Equal(t, "RDGo", string(b[:4]))
	assert.Equal(t, []byte{4, 0, 128, 0}, b[4:8])
	assert.Equal(t, []byte{0x00, 0x10, 0, 0, 0, 0x7f, 0, 0}, b[8:16])
	assert.Equal(t, []byte{0x34, 0x12, 0, 0, 20, 22, 0xd0, 0x07, 0, 0, 0, 0}, b[16:28])

	// Version 2 (what a listener answers a peer of version 2) has no
	// grow field, version 1 no heartbeat field either: their bytes stay
	// zero whatever the Hello holds, and the ring does not grow.
	h := validHello()
	h.Version = 2
	b = h.Marshal()
	assert.Equal(t, []byte{0x34, 0x12, 0, 0, 20, 0, 0xd0, 0x07, 0, 0, 0, 0}, b[16:28])
	got, err := ParseHello(b)
	require.NoError(t, err)
	assert.Equal(t, uint8(20), got.GrowLog)
	h.Version = 1
	b = h.Marshal()
	assert.Equal(t, []byte{1, 0, 128, 0}, b[4:8])
	assert.Equal(t, []byte{0x34, 0x12, 0, 0, 20, 0, 0, 0, 0, 0, 0, 0}, b[16:28])
	got, err = ParseHello(b)
	require.NoError(t, err)
	assert.Zero(t, got.Heartbeat)

	// Flags travel in byte 5 in every version; a side ignores those it
	// does not know.
	h = validHello()
	h.Flags = FlagRDMACM | 0x80
	b = h.Marshal()
	assert.Equal(t, byte(0x81), b[5])
	got, err = ParseHello(b)
	require.NoError(t, err)
	assert.Equal(t, h, got)
}

// A hello of version 1, byte for byte as a peer of that version sends it,
// parses with no heartbeat; one whose heartbeat bytes are set is refused,
// as a version 1 side refuses it.
func TestHelloVersion1(t *testing.T) {
	v1 := []byte{'R', 'D', 'G', 'o', 1, 0, 128, 0, 0x00, 0x10, 0, 0, 0, 0x7f, 0, 0,
		0x34, 0x12, 0, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	h, err := ParseHello(resum(v1))
	require.NoError(t, err)
	assert.Equal(t, Hello{Version: 1, RecvDepth: 128, RingAddr: 0x7f0000001000, RingKey: 0x1234, RingLog: 20, GrowLog: 20}, h)
	v1[22] = 0xd0
	_, err = ParseHello(resum(v1))
	assert.ErrorIs(t, err, ErrHello)
}

func TestHelloRejects(t *testing.T) {
	good := validHello().Marshal()
	mutate := map[string]func(b []byte) []byte{
		"short":     func(b []byte) []byte { return b[:HelloLen-1] },
		"empty":     func(b []byte) []byte { return nil },
		"magic":     func(b []byte) []byte { b[0] = 'X'; return b },
		"checksum":  func(b []byte) []byte { b[16] ^= 1; return b },
		"version 0": func(b []byte) []byte { b[4] = 0; return resum(b) },
		"depth 0":   func(b []byte) []byte { b[6], b[7] = 0, 0; return resum(b) },
		"depth 7":   func(b []byte) []byte { b[6], b[7] = 7, 0; return resum(b) },
		"depth big": func(b []byte) []byte { b[6], b[7] = 0, 4; return resum(b) },
		"ring tiny": func(b []byte) []byte { b[20] = MinRingLog - 1; return resum(b) },
		"ring huge": func(b []byte) []byte { b[20] = MaxRingLog + 1; return resum(b) },
		"addr 0":    func(b []byte) []byte { clear(b[8:16]); return resum(b) },
		"addr wrap": func(b []byte) []byte {
			for i := 8; i < 16; i++ {
				b[i] = 0xff
			}
			return resum(b)
		},
		"grow below":               func(b []byte) []byte { b[21] = 19; return resum(b) },
		"grow huge":                func(b []byte) []byte { b[21] = MaxRingLog + 1; return resum(b) },
		"reserved 21 in version 2": func(b []byte) []byte { b[4], b[21] = 2, 1; return resum(b) },
		"reserved 24":              func(b []byte) []byte { b[24] = 1; return resum(b) },
		"reserved 27":              func(b []byte) []byte { b[27] = 1; return resum(b) },
	}
	for name, f := range mutate {
		t.Run(name, func(t *testing.T) {
			b := f(append([]byte(nil), good...))
			_, err := ParseHello(b)
			assert.True(t, errors.Is(err, ErrHello), "%v", err)
		})
	}
	// A later version with reserved bytes in use is accepted: we answer
	// with ours.
	b := append([]byte(nil), good...)
	b[4], b[25] = Version+1, 1
	h, err := ParseHello(resum(b))
	require.NoError(t, err)
	assert.Equal(t, uint8(Version+1), h.Version)
	assert.Equal(t, uint16(2000), h.Heartbeat, "a later version keeps the heartbeat field")
	assert.Equal(t, uint8(22), h.GrowLog, "and the grow field")
}

func resum(b []byte) []byte {
	sum := crc32.ChecksumIEEE(b[:28])
	b[28], b[29], b[30], b[31] = byte(sum), byte(sum>>8), byte(sum>>16), byte(sum>>24)
	return b
}

func TestReject(t *testing.T) {
	assert.Equal(t, byte(RejectBadHello), ParseReject(MarshalReject(RejectBadHello)))
	assert.Equal(t, byte(RejectNoResources), ParseReject(append(MarshalReject(RejectNoResources), make([]byte, 142)...)))
	assert.Equal(t, byte(0), ParseReject([]byte("garbage")))
	assert.Equal(t, byte(0), ParseReject(nil))
	assert.LessOrEqual(t, RejectLen, 148, "fits a reject's private data")
}

func TestRingLog(t *testing.T) {
	assert.Equal(t, uint8(12), RingLog(4096))
	assert.Equal(t, uint8(30), RingLog(1<<30))
}

func FuzzParseHello(f *testing.F) {
	f.Add(validHello().Marshal())
	f.Add([]byte{})
	f.Add([]byte("RDGo"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseHello(b)
		if err != nil {
			return
		}
		// Whatever passes is within the limits the data path relies on.
		if h.RecvDepth < MinRecvDepth || h.RecvDepth > MaxRecvDepth || h.RingLog < MinRingLog || h.RingLog > MaxRingLog || h.RingAddr == 0 {
			t.Fatalf("accepted out-of-range hello %+v", h)
		}
		again, err := ParseHello(h.Marshal())
		if err != nil || again != h {
			t.Fatalf("re-marshalled hello does not parse back: %v", err)
		}
	})
}
