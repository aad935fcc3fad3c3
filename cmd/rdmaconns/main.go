// Command rdmaconns measures what a connection costs while it is held: it
// opens N connections from this process to a listener in this process, each
// echoing one byte (dial to first echo is the setup time), holds them all,
// and reports per endpoint (each connection has two, one per side) the
// resident memory, the registrable memory (verbs.AllocMemory) and the
// descriptors, beside Go's own TCP through the same code in the same run.
//
//	rdmaconns -n 1000                       # soft: shared memory, then soft's TCP path
//	rdmaconns -n 10000 -paths shm
//	rdmaconns -n 1000 -paths tcp -phases    # where the setup's time goes, step by step
//	rdmaconns -n 1000 -paths rdmacore -addr $SOFTROCE_IP   # in the Soft-RoCE VM
//
// Paths: shm (soft provider, same-host shared memory), tcp (soft provider,
// TCP frames), rdmacore (the rdmacore provider), net (Go's net.Dial and
// net.Listen: the baseline, always run). Resident memory is the growth of
// the process's VmRSS after a garbage collection, divided by 2N.
package main

import (
	"context"
	"fmt"
	"io"

	"github.com/rdmanet/rdma/internal/cmdmain"
)

func main() { cmdmain.Run("rdmaconns", run) }

// run parses args, measures every path, and prints the report.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	if err := raiseFDLimit(8*o.n + 256); err != nil {
		return err
	}
	stopProfile, err := cmdmain.StartCPUProfile(o.cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	var results []result
	for _, p := range o.paths {
		if !o.quiet {
			fmt.Fprintf(stderr, "rdmaconns: %s, %d connections...\n", p, o.n)
		}
		r, err := measure(ctx, p, o)
		if err != nil {
			// What was measured is still worth seeing.
			if len(results) > 0 {
				_ = report(stdout, o, results)
			}
			return fmt.Errorf("%s: %w", p, err)
		}
		results = append(results, r)
	}
	return report(stdout, o, results)
}
