package onesided

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDescRoundTrip(t *testing.T) {
	d := Desc{Access: AccessRead | AccessWrite, Addr: 0x7f0012345000, Len: 8192, RKey: 0xdeadbeef, ID: 42}
	b := make([]byte, DescLen)
	d.Marshal(b)
	got, err := Parse(b)
	require.NoError(t, err)
	assert.Equal(t, d, got)
	assert.Zero(t, testing.AllocsPerRun(100, func() { _, _ = Parse(b) }))
}

func TestDescRejects(t *testing.T) {
	good := Desc{Access: AccessWrite, Addr: 4096, Len: 100, RKey: 7, ID: 1}
	cases := map[string]func(b []byte) []byte{
		"short":          func(b []byte) []byte { return b[:DescLen-1] },
		"magic":          func(b []byte) []byte { b[0] = 'X'; return b },
		"version":        func(b []byte) []byte { b[4] = 2; return b },
		"no access":      func(b []byte) []byte { b[5] = 0; return b },
		"unknown access": func(b []byte) []byte { b[5] = 4; return b },
		"reserved":       func(b []byte) []byte { b[7] = 1; return b },
		"zero length":    func(b []byte) []byte { clear(b[16:24]); return b },
		"too long":       func(b []byte) []byte { b[23] = 0x80; return b },
		"wraps":          func(b []byte) []byte { copy(b[8:16], []byte{0, 0, 0, 0, 0, 0, 0, 0xff}); b[21] = 1; return b },
	}
	for name, mangle := range cases {
		t.Run(name, func(t *testing.T) {
			b := make([]byte, DescLen)
			good.Marshal(b)
			_, err := Parse(mangle(b))
			require.ErrorIs(t, err, ErrDesc)
		})
	}
}

func TestDescCheck(t *testing.T) {
	d := Desc{Access: AccessRead, Addr: 1000, Len: 100}
	at, err := d.Check(10, 90, AccessRead)
	require.NoError(t, err)
	assert.Equal(t, uint64(1010), at)
	_, err = d.Check(10, 91, AccessRead)
	require.ErrorIs(t, err, ErrDesc)
	_, err = d.Check(101, 0, AccessRead)
	require.ErrorIs(t, err, ErrDesc)
	_, err = d.Check(^uint64(0), 2, AccessRead)
	require.ErrorIs(t, err, ErrDesc)
	_, err = d.Check(0, 1, AccessWrite)
	require.ErrorContains(t, err, "exposed for read, not write")
}

// FuzzParse: no input panics; whatever parses re-encodes to the same bytes
// and describes a region that neither is empty nor wraps, and Check never
// returns an address outside it.
func FuzzParse(f *testing.F) {
	b := make([]byte, DescLen)
	Desc{Access: AccessRead, Addr: 1 << 20, Len: 4096, RKey: 9, ID: 3}.Marshal(b)
	f.Add(b, uint64(0), uint64(4096))
	f.Add(make([]byte, DescLen), uint64(1), uint64(2))
	f.Fuzz(func(t *testing.T, b []byte, off, n uint64) {
		d, err := Parse(b)
		if err != nil {
			return
		}
		again := make([]byte, DescLen)
		d.Marshal(again)
		if string(again) != string(b) {
			t.Fatalf("re-encoding differs")
		}
		if d.Len == 0 || d.Len > MaxLen || d.Addr+d.Len < d.Addr {
			t.Fatalf("accepted a bad region %+v", d)
		}
		at, err := d.Check(off, n, d.Access)
		if err == nil && (at < d.Addr || at+n > d.Addr+d.Len || at+n < at) {
			t.Fatalf("Check(%d, %d) = %d outside %+v", off, n, at, d)
		}
	})
}
