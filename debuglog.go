package rdma

import (
	"log/slog"
	"os"

	"github.com/rdmanet/rdma/internal/debuglog"
	"github.com/rdmanet/rdma/verbs/soft"
)

// Debug logs, in the manner of NCCL_DEBUG: RDMA_DEBUG sets the level
// (WARN or 1, INFO or 2, TRACE or 3; DEBUG is TRACE; unset, 0 or OFF:
// off; any other value is warned about once, on stderr, and leaves the
// logs off) and
// RDMA_DEBUG_SUBSYS the subsystems logged, a comma-separated list of
// dial (provider choice, device, fallback), shm (which soft path and why),
// ring (ring and send buffer growth), conn (a connection's failure), or
// ALL (the default); a leading ^ logs all but the ones listed (a name
// it does not know is warned about once and ignored). For example:
//
//	RDMA_DEBUG=INFO RDMA_DEBUG_SUBSYS=dial,shm ./prog
//
// Records go through log/slog, to stderr as text unless SetDebugLogger
// names another logger. Off, each place that could log tests one
// package variable and builds nothing.

// LevelTrace is RDMA_DEBUG=TRACE's slog level: below Debug.
const LevelTrace = slog.Level(-8)

func init() {
	debuglog.Set(os.Getenv("RDMA_DEBUG"), os.Getenv("RDMA_DEBUG_SUBSYS"))
	soft.SetCarrierHook(logCarrier)
}

// SetDebugLogger sends the RDMA_DEBUG records to l (nil: stderr, as
// text). The level and subsystems stay RDMA_DEBUG's.
func SetDebugLogger(l *slog.Logger) { debuglog.SetLogger(l) }

// logFallback logs why an auto dial to raddr fell back to soft.
func logFallback(raddr *Addr, fb error) {
	if fb != nil && debuglog.On(debuglog.Dial, slog.LevelWarn) {
		debuglog.Log("dial", slog.LevelWarn, "fell back to soft", "peer", addrString(raddr), "reason", fb.Error())
	}
}

// logCarrier logs a soft connection's move to shared memory after its
// handshake, or the failure that keeps it on TCP.
func logCarrier(ev soft.CarrierEvent) {
	local, peer := "", ""
	if ev.Local != nil {
		local = ev.Local.String()
	}
	if ev.Remote != nil {
		peer = ev.Remote.String()
	}
	switch {
	case ev.Err != nil && debuglog.On(debuglog.Shm, slog.LevelWarn):
		debuglog.Log("shm", slog.LevelWarn, "staying on TCP: the move to shared memory failed", "local", local, "peer", peer, "err", ev.Err.Error())
	case ev.Err == nil && debuglog.On(debuglog.Shm, slog.LevelInfo):
		debuglog.Log("shm", slog.LevelInfo, "moved to shared memory", "local", local, "peer", peer, "path", "soft-"+ev.Carrier)
	}
}

// logProviderChoice logs which provider a Config or RDMA_PROVIDER value
// resolved to, and why.
func logProviderChoice(asked, chosen, why string) {
	if debuglog.On(debuglog.Dial, slog.LevelInfo) {
		debuglog.Log("dial", slog.LevelInfo, "provider chosen", "asked", asked, "provider", chosen, "why", why)
	}
}

func addrString(a *Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}
