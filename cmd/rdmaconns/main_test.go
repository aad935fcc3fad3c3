package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A short run on every soft path: each reports its connections, a setup
// time, descriptors per endpoint (net and soft's TCP path one, shared
// memory three: its eventfd, the peer's and the TCP connection), and
// registered memory only for the rdma paths.
func TestRunReports(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"-n", "20", "-paths", "shm,tcp", "-json", "-q", "-addr", "127.0.0.62"}, &out, io.Discard)
	require.NoError(t, err)
	var rs []result
	require.NoError(t, json.Unmarshal(out.Bytes(), &rs))
	require.Len(t, rs, 3)
	want := map[string]float64{"net": 1, "shm": 2, "tcp": 1}
	for _, r := range rs {
		assert.Equal(t, 20, r.Conns, r.Path)
		assert.Positive(t, r.SetupMean, r.Path)
		assert.LessOrEqual(t, r.DialMean, r.SetupMean, r.Path)
		assert.Positive(t, r.CPUPerConn, "%s: CPU per conn", r.Path)
		if r.Path == "shm" {
			// The shm row's connections move to shared memory at once
			// (each past the first four then holds 2 descriptors, the peer's eventfd and the
			// handshake's TCP connection, its own wake-ups coming through
			// the doorbell of the peer process, here this one): they say
			// so in their stats, bar one still mid-move when the row was
			// taken.
			require.NotNil(t, r.Stats)
			assert.GreaterOrEqual(t, r.Stats.Paths["soft-shm"], 2*20-2, "the shm row's endpoints are on shared memory: %v", r.Stats.Paths)
			assert.InDelta(t, want[r.Path], r.FDsPerEP, 0.2, "%s: descriptors per endpoint", r.Path)
		} else {
			assert.InDelta(t, want[r.Path], r.FDsPerEP, 0.1, "%s: descriptors per endpoint", r.Path)
		}
		if r.Path == "net" {
			assert.Zero(t, r.RegPerEP, r.Path)
		} else {
			assert.Positive(t, r.RegPerEP, r.Path)
		}
	}
	assert.Equal(t, []string{"net", "shm", "tcp"}, []string{rs[0].Path, rs[1].Path, rs[2].Path})
}

func TestOptionsRefuseBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"-n", "0"},
		{"-n", "1000000"},
		{"-paths", "udp"},
		{"-addr", "not-an-ip"},
		{"-ring", "-1"},
		{"extra"},
	} {
		_, err := parseOptions(args, io.Discard)
		assert.Error(t, err, "%q", args)
	}
	o, err := parseOptions(nil, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"net", "shm", "tcp"}, o.paths)
	assert.Equal(t, defaultConns, o.n)
}

// -phases reports the setup's steps in the order they came, each reached
// by every connection, on Go's TCP (the echo's steps) and on soft's TCP
// path (the library's too), and the page faults and goroutines started
// per connection.
func TestRunPhases(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"-n", "10", "-paths", "tcp", "-json", "-q", "-phases", "-addr", "127.0.0.72"}, &out, io.Discard)
	require.NoError(t, err)
	var rs []result
	require.NoError(t, json.Unmarshal(out.Bytes(), &rs))
	require.Len(t, rs, 2)
	want := map[string][]string{
		"net": {"client: dial returned", "server: byte read", "client: echo read"},
		// Each step here is marked before what makes the next one happen
		// (a step marked after a write can come after the peer read it).
		"tcp": {"dial: route resolved", "soft listen: REQ read", "listen: endpoint created",
			"soft connect: REP read", "dial: established", "client: dial returned", "client: echo read"},
	}
	for _, r := range rs {
		at := map[string]float64{}
		for i, s := range r.Phases {
			if i > 0 {
				assert.GreaterOrEqual(t, s.AtUS, r.Phases[i-1].AtUS, "%s: steps in order", r.Path)
			}
			at[s.Step] = s.AtUS
		}
		prev := 0.0
		for _, step := range want[r.Path] {
			require.Contains(t, at, step, "%s", r.Path)
			assert.Greater(t, at[step], prev, "%s: %s after the step before", r.Path, step)
			prev = at[step]
		}
		for _, s := range r.Phases {
			assert.Equal(t, 10, s.Conns, "%s: %s", r.Path, s.Step)
		}
		if r.Path == "tcp" { // its registered memory is fresh, at least
			assert.Positive(t, r.FaultsPerConn, r.Path)
		}
		// The echo's server goroutine, at least.
		assert.GreaterOrEqual(t, r.GoroutinesPerConn, 1.0, r.Path)
	}
}
