package collectives

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// reduceRef is reduce3Bytes's definition, element by element, with no
// vector loop.
func reduceRef[T Number](dst, a, b []T, op Op) {
	for i := range dst {
		switch op {
		case Sum:
			dst[i] = a[i] + b[i]
		case Prod:
			dst[i] = a[i] * b[i]
		case Min:
			dst[i] = min(a[i], b[i])
		case Max:
			dst[i] = max(a[i], b[i])
		}
	}
}

// checkReduce compares reduce3Bytes with reduceRef bit for bit on every
// length up to 300 elements (vector rounds and the remainder) at offsets
// that misalign the slices, into a separate buffer and in place on either
// operand.
func checkReduce[T Number](t *testing.T, gen func(r *rand.Rand) T, bits func(T) uint64) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, op := range []Op{Sum, Prod, Min, Max} {
		for n := 0; n <= 300; n += 1 + n/16 {
			for off := range 3 {
				a, b := make([]T, n+off), make([]T, n+off)
				for i := range a {
					a[i], b[i] = gen(r), gen(r)
				}
				a, b = a[off:], b[off:]
				want := make([]T, n)
				reduceRef(want, a, b, op)
				for _, into := range []string{"dst", "a", "b"} {
					got := make([]T, n)
					switch into {
					case "a":
						copy(got, a)
						reduce3Bytes[T](bytesOf(got), bytesOf(got), bytesOf(b), op)
					case "b":
						copy(got, b)
						reduce3Bytes[T](bytesOf(got), bytesOf(a), bytesOf(got), op)
					default:
						reduce3Bytes[T](bytesOf(got), bytesOf(a), bytesOf(b), op)
					}
					for i := range want {
						require.Equal(t, bits(want[i]), bits(got[i]), "%v, %d elements, offset %d, into %s: element %d of %v %v %v",
							op, n, off, into, i, a[i], op, b[i])
					}
				}
			}
		}
	}
}

// The vector loops compute exactly what the Go loops do, for every type and
// operator, including infinities, signed zeros and subnormals.
func TestReduceMatchesElementwise(t *testing.T) {
	specials32 := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), math.SmallestNonzeroFloat32, math.MaxFloat32}
	specials64 := []float64{0, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), math.SmallestNonzeroFloat64, math.MaxFloat64}
	t.Run("float32", func(t *testing.T) {
		checkReduce(t, func(r *rand.Rand) float32 {
			if r.IntN(8) == 0 {
				return specials32[r.IntN(len(specials32))]
			}
			return float32(r.NormFloat64() * 1e3)
		}, func(v float32) uint64 { return uint64(math.Float32bits(v)) })
	})
	t.Run("float64", func(t *testing.T) {
		checkReduce(t, func(r *rand.Rand) float64 {
			if r.IntN(8) == 0 {
				return specials64[r.IntN(len(specials64))]
			}
			return r.NormFloat64() * 1e3
		}, math.Float64bits)
	})
	t.Run("int32", func(t *testing.T) {
		checkReduce(t, func(r *rand.Rand) int32 { return int32(r.Uint32()) }, func(v int32) uint64 { return uint64(v) })
	})
	t.Run("uint32", func(t *testing.T) {
		checkReduce(t, func(r *rand.Rand) uint32 { return r.Uint32() }, func(v uint32) uint64 { return uint64(v) })
	})
	t.Run("int64", func(t *testing.T) {
		checkReduce(t, func(r *rand.Rand) int64 { return int64(r.Uint64()) }, func(v int64) uint64 { return uint64(v) })
	})
	t.Run("uint64", func(t *testing.T) {
		checkReduce(t, func(r *rand.Rand) uint64 { return r.Uint64() }, func(v uint64) uint64 { return v })
	})
}

// A NaN in either operand gives a NaN, in the vector rounds as in the rest.
func TestReduceNaN(t *testing.T) {
	nan := float32(math.NaN())
	for _, op := range []Op{Sum, Prod, Min, Max} {
		a, b := make([]float32, 40), make([]float32, 40)
		for i := range a {
			a[i], b[i] = float32(i), 2
		}
		a[3], b[20], a[37] = nan, nan, nan
		dst := make([]float32, 40)
		reduce3Bytes[float32](bytesOf(dst), bytesOf(a), bytesOf(b), op)
		for i, v := range dst {
			require.Equal(t, i == 3 || i == 20 || i == 37, math.IsNaN(float64(v)), "%v: element %d is %v", op, i, v)
		}
	}
}

func BenchmarkReduce(b *testing.B) {
	for _, n := range []int{4 << 10, 128 << 10, 4 << 20} {
		x, y, d := make([]byte, n), make([]byte, n), make([]byte, n)
		b.Run(name("float32-sum/", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				reduce3Bytes[float32](d, x, y, Sum)
			}
		})
		b.Run(name("copy/", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				copy(d, x)
			}
		})
	}
}
