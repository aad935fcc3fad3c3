package rdma

import "github.com/rdmanet/rdma/internal/streamconn"

// WindowsEnv chooses how rendezvous Writes expose their bytes: 0 always
// by a registration (a way around a device whose windows misbehave, and to
// compare the two), 1 through a memory window wherever the device has
// them, rxe included; unset, through windows except on rxe.
const WindowsEnv = "RDMA_MEMORY_WINDOWS"

// testNoWindows makes rendezvous Writes register what they expose, as on
// a device without windows (the tests' switch, export_test.go's
// SetNoWindows, for both paths on one provider); the engine reads it
// through streamconn.NoWindows.
var testNoWindows bool

func init() { streamconn.NoWindows = &testNoWindows }
