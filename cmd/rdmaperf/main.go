// Command rdmaperf measures rdma.Conn: stream bandwidth and round-trip
// latency (p50/p99/p99.9) for message sizes from 1 B to 64 MiB, on one or
// several connections, beside TCP through the same code in the same run;
// -buffers sends and receives from rdma.Buffers (the zero-copy paths).
//
//	rdmaperf -s [-addr 127.0.0.1:18515]   # server: serves any client run
//	rdmaperf -c 127.0.0.1:18515           # client
//	rdmaperf -loopback [-fork]            # both, on 127.0.0.1
//
// Every test connection starts with a small control header (test kind,
// message size, duration or count), so the server needs no flags beyond
// where to listen. See -h for everything else.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/rdmanet/rdma/internal/cmdmain"
)

func main() { cmdmain.Run("rdmaperf", run) }

// run is the whole program: parse args, then serve, or run a client and
// print its report on stdout.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	stopProfile, err := cmdmain.StartCPUProfile(o.cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	if o.server {
		return runServer(ctx, o, stdout, stderr)
	}
	rep, err := runClient(ctx, o, stderr)
	if err != nil {
		return err
	}
	if o.jsonFile != "" {
		if err := writeJSONFile(rep, o.jsonFile); err != nil {
			return err
		}
	}
	if o.json {
		return rep.WriteJSON(stdout)
	}
	return writeTable(rep, stdout)
}

func writeJSONFile(rep *report, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := rep.WriteJSON(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}
