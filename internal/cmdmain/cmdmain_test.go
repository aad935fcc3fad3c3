package cmdmain

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStartCPUProfile(t *testing.T) {
	stop, err := StartCPUProfile("")
	require.NoError(t, err)
	stop() // profiles nothing, and stopping that is fine

	path := filepath.Join(t.TempDir(), "cpu.pprof")
	stop, err = StartCPUProfile(path)
	require.NoError(t, err)
	stop()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Positive(t, fi.Size(), "a profile was written")

	_, err = StartCPUProfile(filepath.Join(t.TempDir(), "missing", "cpu.pprof"))
	assert.Error(t, err)
}
