package hostaddr

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestLocal(t *testing.T) {
	assert.True(t, Local(net.IPv4(127, 0, 0, 1)))
	assert.True(t, Local(net.IPv6loopback))
	assert.True(t, Local(net.IPv4zero))
	// TEST-NET-3 (RFC 5737): never an interface's address here.
	assert.False(t, Local(net.IPv4(203, 0, 113, 7)))
}
