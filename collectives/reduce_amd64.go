package collectives

import "unsafe"

// The SSE2 loops of reduce_amd64.s: dst[i] = a[i] op b[i] over n bytes, n
// a multiple of 64.

//go:noescape
func sumF32(dst, a, b *byte, n uintptr)

//go:noescape
func sumF64(dst, a, b *byte, n uintptr)

//go:noescape
func sumI32(dst, a, b *byte, n uintptr)

//go:noescape
func sumI64(dst, a, b *byte, n uintptr)

//go:noescape
func prodF32(dst, a, b *byte, n uintptr)

//go:noescape
func prodF64(dst, a, b *byte, n uintptr)

// reduceVector reduces the longest prefix of dst that is a multiple of 64
// bytes with a vector loop, if there is one for T and op, and returns its
// length (0: none; the caller's loop does it all).
func reduceVector[T Number](dst, a, b []byte, op Op) int {
	m := len(dst) &^ 63
	if m == 0 {
		return 0
	}
	var f func(dst, a, b *byte, n uintptr)
	switch arg := typeArg[T](0); {
	case op == Sum && arg == 4|0x10|0x20:
		f = sumF32
	case op == Sum && arg == 8|0x10|0x20:
		f = sumF64
	case op == Sum && arg&^0x20 == 4:
		f = sumI32 // signed and unsigned wrap around alike
	case op == Sum && arg&^0x20 == 8:
		f = sumI64
	case op == Prod && arg == 4|0x10|0x20:
		f = prodF32
	case op == Prod && arg == 8|0x10|0x20:
		f = prodF64
	default:
		return 0
	}
	f(unsafe.SliceData(dst), unsafe.SliceData(a), unsafe.SliceData(b), uintptr(m))
	return m
}
