//go:build !amd64

package collectives

// reduceVector: no vector loops here; reduce3Bytes's loop does it all.
func reduceVector[T Number](dst, a, b []byte, op Op) int { return 0 }
