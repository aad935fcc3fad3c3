package soft

// ShmConnections counts connections set up over shared memory so far.
func ShmConnections() int64 { return shmUsed.Load() }
