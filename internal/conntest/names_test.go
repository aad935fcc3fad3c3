package conntest

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Each subtest is named by its function less "test" (register): the names
// the providers' Skip maps and the scripts' -run patterns use.
func TestSubtestNames(t *testing.T) {
	names := Names()
	for _, want := range []string{"Nettest", "Echo", "DialHeldRequest", "Deadlines", "PeerPausedUnderTimeout", "HTTP", "TLS"} {
		assert.Contains(t, names, want)
	}
	assert.Len(t, names, 20)
}
