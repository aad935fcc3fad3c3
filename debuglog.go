package rdma

import (
	"context"
	"log/slog"
	"math/bits"
	"os"
	"strings"
	"sync/atomic"
)

// Debug logs, in the manner of NCCL_DEBUG: RDMA_DEBUG sets the level
// (WARN, INFO or TRACE; unset or anything else: off) and
// RDMA_DEBUG_SUBSYS the subsystems logged, a comma-separated list of
// dial (provider choice, device, fallback), shm (which soft path and why),
// ring (ring and send buffer growth), conn (a connection's failure), or
// ALL (the default); a leading ^ logs all but the ones listed. For
// example:
//
//	RDMA_DEBUG=INFO RDMA_DEBUG_SUBSYS=dial,shm ./prog
//
// Records go through log/slog, to stderr as text unless SetDebugLogger
// names another logger. Off, each place that could log tests one
// package variable and builds nothing.

// Subsystems, a bit each.
const (
	subDial = 1 << iota
	subShm
	subRing
	subConn
	subAll = subDial | subShm | subRing | subConn
)

var subsysNames = map[string]int{"dial": subDial, "shm": subShm, "ring": subRing, "conn": subConn, "all": subAll}

// LevelTrace is RDMA_DEBUG=TRACE's slog level: below Debug.
const LevelTrace = slog.Level(-8)

// debugOn holds, per subsystem, the lowest level logged, with off as
// above any level: one atomic load decides.
var (
	debugMin    [4]atomic.Int32
	debugLogger atomic.Pointer[slog.Logger]
)

const levelOff = slog.Level(1 << 20)

func init() { setDebug(os.Getenv("RDMA_DEBUG"), os.Getenv("RDMA_DEBUG_SUBSYS")) }

// setDebug applies RDMA_DEBUG and RDMA_DEBUG_SUBSYS's values.
func setDebug(level, subsys string) {
	min := levelOff
	switch strings.ToUpper(strings.TrimSpace(level)) {
	case "WARN":
		min = slog.LevelWarn
	case "INFO":
		min = slog.LevelInfo
	case "TRACE", "DEBUG":
		min = LevelTrace
	}
	mask := subAll
	if s := strings.TrimSpace(subsys); s != "" {
		neg := strings.HasPrefix(s, "^")
		m := 0
		for _, name := range strings.Split(strings.TrimPrefix(s, "^"), ",") {
			m |= subsysNames[strings.ToLower(strings.TrimSpace(name))]
		}
		if mask = m; neg {
			mask = subAll &^ m
		}
	}
	for i := range debugMin {
		l := levelOff
		if mask&(1<<i) != 0 {
			l = min
		}
		debugMin[i].Store(int32(l))
	}
}

// SetDebugLogger sends the RDMA_DEBUG records to l (nil: stderr, as
// text). The level and subsystems stay RDMA_DEBUG's.
func SetDebugLogger(l *slog.Logger) { debugLogger.Store(l) }

// debugOn reports whether records of sub at level are logged: the test
// in front of every record, so that nothing is built when they are not.
func debugOn(sub int, level slog.Level) bool {
	return level >= slog.Level(debugMin[bits.TrailingZeros(uint(sub))].Load())
}

// debugLog logs one record; callers test debugOn first.
func debugLog(sub string, level slog.Level, msg string, args ...any) {
	l := debugLogger.Load()
	if l == nil {
		l = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: LevelTrace}))
	}
	l.Log(context.Background(), level, "rdma: "+msg, append([]any{"subsys", sub}, args...)...)
}

// logFallback logs why an auto dial to raddr fell back to soft.
func logFallback(raddr *Addr, fb error) {
	if fb != nil && debugOn(subDial, slog.LevelWarn) {
		debugLog("dial", slog.LevelWarn, "fell back to soft", "peer", addrString(raddr), "reason", fb.Error())
	}
}

// logEstablished logs what carries a new connection: the provider, the
// device and, on soft, the path and why it is not shared memory when it
// is not.
func (c *Conn) logEstablished() {
	if !debugOn(subDial, slog.LevelInfo) && !debugOn(subShm, slog.LevelInfo) {
		return
	}
	dev := ""
	if ctx := c.id.Context(); ctx != nil {
		dev = ctx.Name()
	}
	path := pathOf(c.provider, c.qp)
	if debugOn(subDial, slog.LevelInfo) {
		debugLog("dial", slog.LevelInfo, "connection established", "provider", c.provider,
			"device", dev, "path", path, "local", addrString(c.laddr), "peer", addrString(c.raddr))
	}
	if c.provider == ProviderSoft && debugOn(subShm, slog.LevelInfo) {
		if path == "soft-shm" {
			debugLog("shm", slog.LevelInfo, "shared memory in use", "peer", addrString(c.raddr))
		} else {
			debugLog("shm", slog.LevelInfo, "shared memory not used", "peer", addrString(c.raddr), "reason", shmReason(c.laddr, c.raddr))
		}
	}
}

// logProviderChoice logs which provider a Config or RDMA_PROVIDER value
// resolved to, and why.
func logProviderChoice(asked, chosen, why string) {
	if debugOn(subDial, slog.LevelInfo) {
		debugLog("dial", slog.LevelInfo, "provider chosen", "asked", asked, "provider", chosen, "why", why)
	}
}

// logFailure logs a connection's failure and its cause (with mu held).
func (c *Conn) logFailure(err error) {
	if c.failureLocked() == nil {
		return // the peer closed
	}
	if debugOn(subConn, slog.LevelWarn) {
		debugLog("conn", slog.LevelWarn, "connection failed", "provider", c.provider,
			"local", addrString(c.laddr), "peer", addrString(c.raddr), "err", err.Error())
	}
}

// logGrowth logs a ring or send buffer moving to a larger one.
func (c *Conn) logGrowth(what string, from, to int) {
	if debugOn(subRing, slog.LevelInfo) {
		debugLog("ring", slog.LevelInfo, what+" grew", "peer", addrString(c.raddr), "from", from, "to", to)
	}
}

func addrString(a *Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}
