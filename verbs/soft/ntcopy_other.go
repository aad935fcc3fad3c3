//go:build !amd64

package soft

import "unsafe"

const haveNTCopy = false

func copyNT(dst, src *byte, n uintptr) {
	copy(unsafe.Slice(dst, n), unsafe.Slice(src, n))
}
