package collectives

import (
	"fmt"
	"unsafe"
)

// Op is a reduction operator.
type Op int

const (
	Sum  Op = iota // a + b (integers wrap around)
	Prod           // a * b (integers wrap around)
	Min            // the builtin min: NaN if either operand is NaN
	Max            // the builtin max: NaN if either operand is NaN
)

var opNames = [...]string{Sum: "Sum", Prod: "Prod", Min: "Min", Max: "Max"}

func (o Op) String() string {
	if o.valid() {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

func (o Op) valid() bool { return o >= Sum && o <= Max }

// Number is an element type of AllReduce and Reduce.
type Number interface {
	~int32 | ~int64 | ~uint32 | ~uint64 | ~float32 | ~float64
}

// reducer combines received bytes into local ones; the element type is
// fixed by the instantiation behind fn.
type reducer struct {
	fn   func(dst, src []byte, op Op, srcFirst bool)
	fn3  func(dst, a, b []byte, op Op) // dst = a op b
	op   Op
	elem int
}

// typeArg encodes T and op for frame headers, so that ranks that disagree on
// either fail instead of combining unrelated bits.
func typeArg[T Number](op Op) uint8 {
	var zero T
	one := T(1)
	a := uint8(unsafe.Sizeof(zero)) // 4 or 8
	if one/2 != 0 {
		a |= 0x10 // floating point
	}
	if zero-one < zero {
		a |= 0x20 // signed
	}
	return a | uint8(op)<<6
}

// reduceFuncFor returns the reduction over T's underlying type. The
// instantiations are over concrete types, so that taking them as values
// allocates nothing (a generic T would capture its dictionary).
func reduceFuncFor[T Number]() func(dst, src []byte, op Op, srcFirst bool) {
	switch typeArg[T](0) {
	case 4 | 0x10 | 0x20:
		return reduceBytes[float32]
	case 8 | 0x10 | 0x20:
		return reduceBytes[float64]
	case 4 | 0x20:
		return reduceBytes[int32]
	case 8 | 0x20:
		return reduceBytes[int64]
	case 4:
		return reduceBytes[uint32]
	default:
		return reduceBytes[uint64]
	}
}

// reduce3FuncFor is reduceFuncFor's three-operand form.
func reduce3FuncFor[T Number]() func(dst, a, b []byte, op Op) {
	switch typeArg[T](0) {
	case 4 | 0x10 | 0x20:
		return reduce3Bytes[float32]
	case 8 | 0x10 | 0x20:
		return reduce3Bytes[float64]
	case 4 | 0x20:
		return reduce3Bytes[int32]
	case 8 | 0x20:
		return reduce3Bytes[int64]
	case 4:
		return reduce3Bytes[uint32]
	default:
		return reduce3Bytes[uint64]
	}
}

// reducerFor is the reducer of T and op.
func reducerFor[T Number](op Op) reducer {
	var zero T
	return reducer{fn: reduceFuncFor[T](), fn3: reduce3FuncFor[T](), op: op, elem: int(unsafe.Sizeof(zero))}
}

// view reinterprets b (which comes from a []T or an 8-byte aligned scratch
// buffer) as a []T.
func view[T Number](b []byte) []T {
	var zero T
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/int(unsafe.Sizeof(zero)))
}

// bytesOf is the memory of s as bytes.
func bytesOf[T Number](s []T) []byte {
	var zero T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(zero)))
}

// reduceBytes sets dst[i] = src[i] op dst[i] (srcFirst) or dst[i] op src[i].
// The operand order matters for bitwise reproducibility (NaN payloads), so
// callers choose it the same way on every rank.
func reduceBytes[T Number](dstB, srcB []byte, op Op, srcFirst bool) {
	if srcFirst {
		reduce3Bytes[T](dstB, srcB, dstB, op) // dst[i] = src[i] op dst[i]
		return
	}
	reduce3Bytes[T](dstB, dstB, srcB, op)
}

// reduce3Bytes sets dst[i] = a[i] op b[i]: a reduction of two buffers into
// a third in one pass (dst may be a or b: each element is read before it
// is written).
func reduce3Bytes[T Number](dstB, aB, bB []byte, op Op) {
	aB, bB = aB[:len(dstB)], bB[:len(dstB)]
	if m := reduceVector[T](dstB, aB, bB, op); m > 0 {
		dstB, aB, bB = dstB[m:], aB[m:], bB[m:]
	}
	dst, a, b := view[T](dstB), view[T](aB), view[T](bB)
	a, b = a[:len(dst)], b[:len(dst)]
	switch op {
	case Sum:
		for i := range dst {
			dst[i] = a[i] + b[i]
		}
	case Prod:
		for i := range dst {
			dst[i] = a[i] * b[i]
		}
	case Min:
		for i := range dst {
			dst[i] = min(a[i], b[i])
		}
	case Max:
		for i := range dst {
			dst[i] = max(a[i], b[i])
		}
	}
}
