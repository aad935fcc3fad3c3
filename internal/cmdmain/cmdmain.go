// Package cmdmain is the common frame of the project's measuring commands
// (rdmaperf, rdmaconns): a run function that stops on SIGINT or SIGTERM,
// errors reported under the command's name, and an optional CPU profile of
// the whole run.
package cmdmain

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
)

// Run calls run with the program's arguments and standard streams, its
// context cancelled by SIGINT or SIGTERM, and exits 1 with the error
// printed after name if it fails (-h's flag.ErrHelp is no failure).
func Run(name string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

// StartCPUProfile writes a CPU profile to path until the returned stop is
// called; an empty path profiles nothing.
func StartCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
