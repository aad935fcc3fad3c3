//go:build cgo && linux

package rdmacore

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/rdmanet/rdma/verbs"
)

// The provider builds without rdma-core: it opens rdma-core's libraries by
// their stable sonames at run time, the first time it is used, and looks
// each function it calls up once (see entryPoints in cgo.go). The structs it
// shares with them are declared in rdmacore_abi.h.
//
// libraries is indexed by entryPoint.lib, and is the order they are opened
// in: librdmacm depends on libibverbs.
var libraries = []string{libIBVerbs: "libibverbs.so.1", libRDMACM: "librdmacm.so.1"}

const (
	libIBVerbs = iota
	libRDMACM
)

// entryPoint is one function of a library and where its address goes.
type entryPoint struct {
	lib     int // index into libraries
	name    string
	version string          // the symbol version of the ABI in rdmacore_abi.h
	slot    *unsafe.Pointer // its field of the C table the trampolines call through
	// optional: a libibverbs without it still loads; the slot stays nil
	// and missing says why, for the one verb that needs it to report.
	optional bool
}

// missing holds, per optional entry point the libraries lack, what dlvsym
// said. Written once by load (inside loadOnce), read after loaded().
var missing = map[string]string{}

var (
	loadOnce sync.Once
	loadErr  *libraryError
)

// Available reports whether rdma-core's libraries are there: nil once
// libibverbs and librdmacm are loaded (the machine may still have no RDMA
// device), else an error that wraps verbs.ErrNoDevice and says which library
// is missing and what to install. Without these libraries the provider lists
// no device, and the rdma package's automatic choice is the soft provider.
func Available() error {
	if err := loaded(); err != nil {
		return fmt.Errorf("rdmacore: %w", err)
	}
	return nil
}

// loaded loads the libraries the first time it is called and returns what
// that gave.
func loaded() *libraryError {
	loadOnce.Do(func() { loadErr = load(libraries) })
	return loadErr
}

// load opens the files libs names (libraries, or others in tests) and looks
// every entry point up; only when all of them are found are they stored in
// the table the C trampolines call through, so a failed load leaves the
// table as it was. The libraries are never closed: the provider's objects
// live as long as the process.
func load(libs []string) *libraryError {
	handles := make([]unsafe.Pointer, len(libs))
	for i, lib := range libs {
		h, err := dlopen(lib)
		if err != nil {
			return &libraryError{detail: err.Error()}
		}
		handles[i] = h
	}
	eps := entryPoints()
	found := make([]unsafe.Pointer, len(eps))
	lacks := map[string]string{}
	for i, e := range eps {
		p, err := dlvsym(handles[e.lib], e.name, e.version)
		if err != nil {
			detail := fmt.Sprintf("%s lacks %s@%s: %v", libs[e.lib], e.name, e.version, err)
			if !e.optional {
				return &libraryError{detail: detail}
			}
			lacks[e.name] = detail
		}
		found[i] = p
	}
	for i, e := range eps {
		*e.slot = found[i]
	}
	missing = lacks
	return nil
}

// libraryError says that rdma-core's libraries could not be loaded; it is a
// verbs.ErrNoDevice.
type libraryError struct {
	detail string // dlerror's text
}

func (e *libraryError) Error() string {
	return "rdma-core's libraries could not be loaded (" + e.detail + "); to use an RDMA device install " +
		"rdma-core's runtime libraries (Debian, Ubuntu: libibverbs1 librdmacm1 ibverbs-providers; " +
		"Fedora, RHEL: libibverbs librdmacm)"
}

func (e *libraryError) Unwrap() error { return verbs.ErrNoDevice }
