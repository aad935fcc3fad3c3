package main

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseOptionsModes(t *testing.T) {
	o, err := parseOptions([]string{"-s"}, io.Discard)
	require.NoError(t, err)
	assert.True(t, o.server)
	assert.Equal(t, defaultAddr, o.addr)
	assert.Equal(t, "127.0.0.1:18516", o.tcpAddr, "the TCP baseline listens on the next port")
	assert.False(t, o.baseline)

	o, err = parseOptions([]string{"-c", "127.0.0.1:18515", "-baseline", "tcp", "-P", "4", "-t", "5s", "--json"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:18515", o.addr)
	assert.Equal(t, "127.0.0.1:18516", o.tcpAddr)
	assert.True(t, o.baseline)
	assert.Equal(t, 4, o.parallel)
	assert.Equal(t, 5*time.Second, o.duration)
	assert.True(t, o.json, "--json works as well as -json")
	assert.Equal(t, []uint8{kindStream, kindLatency}, o.tests)
	assert.Equal(t, []int{defaultStreamSize}, o.sizesFor(kindStream))
	assert.Equal(t, []int{defaultLatSize}, o.sizesFor(kindLatency))

	o, err = parseOptions([]string{"-loopback"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, loopbackAddr, o.addr, "loopback picks free ports")
	assert.Equal(t, loopbackAddr, o.tcpAddr)
	assert.True(t, o.baseline, "the TCP baseline is on by default with -loopback")

	o, err = parseOptions([]string{"-loopback", "-fork", "-baseline", "none", "-test", "lat", "-sizes", "1,64,4K,64K,1M,4M",
		"-provider", "soft", "-n", "100", "-rounds", "5", "-ring", "2M", "-tcp-addr", "127.0.0.2:0"}, io.Discard)
	require.NoError(t, err)
	assert.True(t, o.fork)
	assert.False(t, o.baseline)
	assert.Equal(t, []uint8{kindLatency}, o.tests)
	assert.Equal(t, []int{1, 64, 4 << 10, 64 << 10, 1 << 20, 4 << 20}, o.sizes)
	assert.Equal(t, []int{1, 64, 4 << 10, 64 << 10, 1 << 20, 4 << 20}, o.sizesFor(kindStream))
	assert.Equal(t, "soft", o.provider)
	assert.Equal(t, int64(100), o.iterations)
	assert.Equal(t, 5, o.rounds)
	assert.Equal(t, 2<<20, o.ringSize)
	assert.Equal(t, "127.0.0.2:0", o.tcpAddr)
}

func TestParseOptionsErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "exactly one mode"},
		{[]string{"-s", "-loopback"}, "exactly one mode"},
		{[]string{"-s", "-c", "127.0.0.1:1"}, "exactly one mode"},
		{[]string{"-s", "-fork"}, "-fork goes with -loopback"},
		{[]string{"-s", "-json"}, "for the client"},
		{[]string{"-loopback", "-child"}, "internal"},
		{[]string{"-loopback", "extra"}, `unexpected argument "extra"`},
		{[]string{"-c", "127.0.0.1"}, "want host:port"},
		{[]string{"-c", ":18515"}, "no host"},
		{[]string{"-c", "127.0.0.1:http"}, "not a number"},
		{[]string{"-c", "127.0.0.1:65535"}, "give -tcp-addr"},
		{[]string{"-loopback", "-tcp-addr", "nope"}, "-tcp-addr"},
		{[]string{"-loopback", "-provider", "ib"}, "want soft, rdmacore or auto"},
		{[]string{"-loopback", "-baseline", "udp"}, "want tcp or none"},
		{[]string{"-loopback", "-test", "stream,jitter"}, `unknown test "jitter"`},
		{[]string{"-loopback", "-sizes", "0"}, "out of range"},
		{[]string{"-loopback", "-sizes", "64,65M"}, "65M is out of range"},
		{[]string{"-loopback", "-sizes", "64,,1K"}, "not a size"},
		{[]string{"-loopback", "-sizes", "12Q"}, `"12Q" is not a size`},
		{[]string{"-loopback", "-sizes", "-4"}, "not a size"},
		{[]string{"-loopback", "-ring", "lots"}, "-ring"},
		{[]string{"-loopback", "-P", "0"}, "-P 0"},
		{[]string{"-loopback", "-P", "100000"}, "-P 100000"},
		{[]string{"-loopback", "-t", "0"}, "positive duration"},
		{[]string{"-loopback", "-n", "-1"}, "-n -1"},
		{[]string{"-loopback", "-warmup", "-1s"}, "-warmup"},
		{[]string{"-loopback", "-rounds", "0"}, "-rounds 0"},
		{[]string{"-loopback", "-bogus"}, "not defined"},
		{[]string{"-loopback", "-P", "two"}, "invalid value"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out strings.Builder
			_, err := parseOptions(tc.args, &out)
			require.Error(t, err)
			assert.Contains(t, err.Error()+out.String(), tc.want)
		})
	}
}

func TestParseOptionsHelp(t *testing.T) {
	var out strings.Builder
	_, err := parseOptions([]string{"-h"}, &out)
	require.ErrorIs(t, err, flag.ErrHelp)
	assert.Contains(t, out.String(), "rdmaperf -s [-addr 127.0.0.1:18515]")
	assert.Contains(t, out.String(), "-sizes")
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int{
		"1": 1, "64": 64, "4K": 4096, "4k": 4096, "64KiB": 64 << 10, "64KB": 64 << 10,
		"1M": 1 << 20, "4MiB": 4 << 20, " 2m ": 2 << 20, "1G": 1 << 30, "512B": 512,
	} {
		got, err := parseSize(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "K", "x", "1.5M", "-1", "1T", "99999999999999G"} {
		_, err := parseSize(in)
		assert.Error(t, err, in)
	}
	for n, want := range map[int]string{1: "1", 64: "64", 1000: "1000", 4096: "4K", 1536: "1536", 64 << 10: "64K", 4 << 20: "4M"} {
		assert.Equal(t, want, formatSize(n))
	}
}
