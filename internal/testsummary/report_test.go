package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testdata/run.json is `go test -json ./...` over three packages: one with a
// passing, a skipped and a failing test (with a failing and a skipped
// subtest), one that passes, one that does not build.
func TestReport(t *testing.T) {
	in, err := os.Open("testdata/run.json")
	require.NoError(t, err)
	defer in.Close()
	var out bytes.Buffer
	r := newReport(&out)
	require.NoError(t, r.read(in))
	r.summary()
	got := out.String()
	t.Log("\n" + got)

	// What CI's log reader looks for: a closing ok or FAIL line per package,
	// and the build failure.
	for _, want := range []string{
		"FAIL\texample.com/ts\t",
		"ok  \texample.com/ts/b\t",
		"FAIL\texample.com/ts/c [build failed]",
		"c/c_test.go:5:33: undefined: undefined",
	} {
		assert.Contains(t, got, want)
	}
	// The failing test's output, without progress lines; nothing from the
	// passing test.
	assert.Contains(t, got, "--- FAIL: TestFail (")
	assert.Contains(t, got, "--- FAIL: TestFail/sub (")
	assert.Contains(t, got, "a_test.go:8: before")
	assert.Contains(t, got, "a_test.go:9: boom")
	assert.NotContains(t, got, "=== RUN")
	assert.NotContains(t, got, "quiet")
	assert.NotContains(t, got, "\nPASS\n")

	// The summary: counts, then each skipped test with its reason.
	assert.Contains(t, got, "tests: 3 passed, 2 failed, 2 skipped")
	_, skipped, ok := strings.Cut(got, "skipped:\n")
	require.True(t, ok, "no list of skipped tests")
	assert.Equal(t,
		"  example.com/ts TestFail/subskip: a_test.go:10: no device 1\n"+
			"  example.com/ts TestSkip: a_test.go:6: needs root\n", skipped)
	assert.Equal(t, 2, r.failed)
}

// A test still running when its package dies (a timeout's panic) gets its
// output shown: its package's fail is the only verdict it gets.
func TestReportUnfinishedTest(t *testing.T) {
	lines := `{"Action":"run","Package":"p","Test":"TestHang"}
{"Action":"output","Package":"p","Test":"TestHang","Output":"=== RUN   TestHang\n"}
{"Action":"output","Package":"p","Test":"TestHang","Output":"panic: test timed out after 1s\n"}
{"Action":"output","Package":"p","Output":"FAIL\tp\t1.0s\n"}
{"Action":"fail","Package":"p"}
not json
`
	var out bytes.Buffer
	r := newReport(&out)
	require.NoError(t, r.read(strings.NewReader(lines)))
	assert.Equal(t, "FAIL\tp\t1.0s\npanic: test timed out after 1s\nnot json\n", out.String())
}
