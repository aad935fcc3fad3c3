// Package debuglog holds the state of rdma's debug logs, in the manner of
// NCCL_DEBUG: the level and subsystems RDMA_DEBUG and RDMA_DEBUG_SUBSYS
// set (Set; the root package's debuglog.go documents the values), the
// logger the records go to, and the one test in front of every record
// (On), so that nothing is built when it is off.
package debuglog

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
)

// Subsystems, a bit each.
const (
	Dial = 1 << iota // provider choice, device, fallback
	Shm              // which soft path and why
	Ring             // ring and send buffer growth
	Conn             // a connection's failure
	All  = Dial | Shm | Ring | Conn
)

var subsysNames = map[string]int{"dial": Dial, "shm": Shm, "ring": Ring, "conn": Conn, "all": All}

// LevelTrace is RDMA_DEBUG=TRACE's slog level: below Debug (the root
// package's LevelTrace, which a test holds equal to it).
const LevelTrace = slog.Level(-8)

// debugMin holds, per subsystem, the lowest level logged, with off as
// above any level: one atomic load decides.
var (
	debugMin    [4]atomic.Int32
	debugLogger atomic.Pointer[slog.Logger]
)

const levelOff = slog.Level(1 << 20)

// Set applies RDMA_DEBUG and RDMA_DEBUG_SUBSYS's values.
func Set(level, subsys string) {
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
	mask := All
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
			mask = All &^ m
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
		fmt.Fprintln(SettingOut, msg)
	}
}

// SettingOut is where the warnings about the settings go (a variable for
// tests).
var SettingOut io.Writer = os.Stderr

// SetLogger sends the records to l (nil: stderr, as text).
func SetLogger(l *slog.Logger) { debugLogger.Store(l) }

// On reports whether records of sub at level are logged: the test
// in front of every record, so that nothing is built when they are not.
func On(sub int, level slog.Level) bool {
	return level >= slog.Level(debugMin[bits.TrailingZeros(uint(sub))].Load())
}

// Log logs one record; callers test On first.
func Log(sub string, level slog.Level, msg string, args ...any) {
	l := debugLogger.Load()
	if l == nil {
		l = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: LevelTrace}))
	}
	l.Log(context.Background(), level, "rdma: "+msg, append([]any{"subsys", sub}, args...)...)
}
