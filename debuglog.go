package rdma

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/bits"
	"os"
	"strings"
	"sync"
	"sync/atomic"

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

func init() {
	setDebug(os.Getenv("RDMA_DEBUG"), os.Getenv("RDMA_DEBUG_SUBSYS"))
	soft.SetCarrierHook(logCarrier)
}

// setDebug applies RDMA_DEBUG and RDMA_DEBUG_SUBSYS's values.
func setDebug(level, subsys string) {
	min := levelOff
	switch v := strings.ToUpper(strings.TrimSpace(level)); v {
	case "WARN", "1":
		min = slog.LevelWarn
	case "INFO", "2":
		min = slog.LevelInfo
	case "TRACE", "DEBUG", "3":
		min = LevelTrace
	case "", "0", "OFF":
	default:
		warnSettingOnce(fmt.Sprintf("rdma: RDMA_DEBUG=%q is not a level (WARN or 1, INFO or 2, TRACE or 3); debug logs stay off", level))
	}
	mask := subAll
	if s := strings.TrimSpace(subsys); s != "" {
		neg := strings.HasPrefix(s, "^")
		m := 0
		for _, name := range strings.Split(strings.TrimPrefix(s, "^"), ",") {
			name = strings.ToLower(strings.TrimSpace(name))
			bit, ok := subsysNames[name]
			if !ok && name != "" {
				warnSettingOnce(fmt.Sprintf("rdma: RDMA_DEBUG_SUBSYS: %q is not a subsystem (dial, shm, ring, conn, all); ignored", name))
			}
			m |= bit
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

// settingWarnings holds the warnings about RDMA_DEBUG's values given so
// far: each is given once in the process.
var settingWarnings sync.Map

// warnSettingOnce writes msg to stderr, once in the process; a program's
// setting is read before it could name a logger.
func warnSettingOnce(msg string) {
	if _, given := settingWarnings.LoadOrStore(msg, true); !given {
		fmt.Fprintln(settingOut, msg)
	}
}

// settingOut is where warnSettingOnce writes (a variable for tests).
var settingOut io.Writer = os.Stderr

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
	qp := c.qp
	if debugOn(subDial, slog.LevelInfo) {
		debugLog("dial", slog.LevelInfo, "connection established", "provider", c.provider,
			"device", dev, "path", path, "local", addrString(c.laddr), "peer", addrString(c.raddr))
	}
	if c.provider == ProviderSoft && debugOn(subShm, slog.LevelInfo) {
		if path == "soft-shm" {
			debugLog("shm", slog.LevelInfo, "shared memory in use", "peer", addrString(c.raddr))
		} else {
			debugLog("shm", slog.LevelInfo, "shared memory not used", "peer", addrString(c.raddr), "reason", shmReason(c.laddr, c.raddr, qp))
		}
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
	case ev.Err != nil && debugOn(subShm, slog.LevelWarn):
		debugLog("shm", slog.LevelWarn, "staying on TCP: the move to shared memory failed", "local", local, "peer", peer, "err", ev.Err.Error())
	case ev.Err == nil && debugOn(subShm, slog.LevelInfo):
		debugLog("shm", slog.LevelInfo, "moved to shared memory", "local", local, "peer", peer, "path", "soft-"+ev.Carrier)
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
