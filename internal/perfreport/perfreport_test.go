package perfreport

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadRefusesWhatIsNotAReport(t *testing.T) {
	for name, in := range map[string]string{
		"another tool": `{"tool":"iperf3","results":[{"test":"stream"}]}`,
		"no results":   `{"tool":"rdmaperf","results":[]}`,
		"unknown test": `{"tool":"rdmaperf","results":[{"test":"stream"},{"test":"other"}]}`,
		"not JSON":     `tool: rdmaperf`,
		"wrong types":  `{"tool":"rdmaperf","results":[{"test":"stream","size":"big"}]}`,
	} {
		_, err := Read(strings.NewReader(in))
		assert.Error(t, err, name)
	}
}

func TestFinishTakesMediansAndRatiosAgainstTCP(t *testing.T) {
	r := &Report{Tool: Tool, Results: []Result{
		{Test: TestStream, Size: 64, Transport: "rdma", Provider: "soft", Rounds: []Measure{{BytesPerSec: 300}, {BytesPerSec: 100}, {BytesPerSec: 200}}},
		{Test: TestStream, Size: 64, Transport: "tcp", Rounds: []Measure{{BytesPerSec: 50}, {BytesPerSec: 100}}},
		{Test: TestLatency, Size: 64, Transport: "rdma", Rounds: []Measure{{P50Ns: 10, Conn: &ConnFigures{Path: "soft-shm", SpinsPerMsg: 1, RefusedPerMsg: 4}}, {P50Ns: 30, Conn: &ConnFigures{Path: "soft-shm", SpinsPerMsg: 3, RefusedPerMsg: 0}}, {P50Ns: 20, Conn: &ConnFigures{Path: "soft-shm", SpinsPerMsg: 2, RefusedPerMsg: 6}}}},
		{Test: TestLatency, Size: 64, Transport: "tcp", Rounds: []Measure{{P50Ns: 40}}},
		{Test: TestLatency, Size: 128, Transport: "rdma", Rounds: []Measure{{P50Ns: 40}}},
	}}
	r.Finish()

	assert.Equal(t, 200.0, r.Results[0].Median.BytesPerSec)
	assert.Equal(t, 75.0, r.Results[1].Median.BytesPerSec, "an even count's median is the mean of the middle two")
	require.NotNil(t, r.Results[0].VsTCP)
	assert.InDelta(t, 200.0/75, *r.Results[0].VsTCP, 1e-9)
	assert.Equal(t, "bytes_per_sec", r.Results[0].VsTCPOf)
	assert.Nil(t, r.Results[1].VsTCP, "TCP is not compared with itself")

	assert.Equal(t, int64(20), r.Results[2].Median.P50Ns)
	require.NotNil(t, r.Results[2].Median.Conn)
	assert.Equal(t, "soft-shm", r.Results[2].Median.Conn.Path)
	assert.Equal(t, 2.0, r.Results[2].Median.Conn.SpinsPerMsg)
	assert.Equal(t, 4.0, r.Results[2].Median.Conn.RefusedPerMsg, "each figure its own median")
	require.NotNil(t, r.Results[2].VsTCP)
	assert.InDelta(t, 0.5, *r.Results[2].VsTCP, 1e-9)
	assert.Equal(t, "p50_ns", r.Results[2].VsTCPOf)

	assert.Nil(t, r.Results[4].VsTCP, "no TCP result of that size: no ratio")
	assert.Equal(t, "rdma/soft", r.Results[0].Label())
	assert.Equal(t, "tcp", r.Results[1].Label())
}

func TestWriteJSONReadsBack(t *testing.T) {
	v := 2.0
	r := &Report{Tool: Tool, Version: 3, Mode: "loopback", Parallel: 8, Rounds: 1, Results: []Result{
		{Test: TestLatency, Size: 64, Transport: "rdma", Provider: "soft", Parallel: 8,
			Rounds: []Measure{{P50Ns: 7, P99Ns: 70}}, Median: Measure{P50Ns: 7, P99Ns: 70}, VsTCP: &v, VsTCPOf: "p50_ns"},
	}}
	var b bytes.Buffer
	require.NoError(t, r.WriteJSON(&b))
	assert.Contains(t, b.String(), `"p99_ns": 70`)
	got, err := Read(&b)
	require.NoError(t, err)
	assert.Equal(t, r, got)
}

func TestMedianOfNothingIsZero(t *testing.T) {
	assert.Equal(t, Measure{}, Median(nil))
}
