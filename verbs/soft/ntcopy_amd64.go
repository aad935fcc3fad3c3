package soft

const haveNTCopy = true

// copyNT copies n bytes (a multiple of 64) from src to dst (64-byte
// aligned) with non-temporal stores, then fences them (ntcopy_amd64.s).
//
//go:noescape
func copyNT(dst, src *byte, n uintptr)
