package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/rdmanet/rdma/verbs/soft"
)

// pathSpec is how a path is chosen: rdma's provider, shared memory on or
// off in this process, and the server processes' environment.
type pathSpec struct {
	provider string
	shm      bool
	env      []string
}

var pathSpecs = map[string]pathSpec{
	"shm":      {provider: "soft", shm: true, env: []string{"RDMA_SOFT_SHM=1"}},
	"tcp":      {provider: "soft", shm: false, env: []string{"RDMA_SOFT_SHM=0"}},
	"rdmacore": {provider: "rdmacore"},
}

// run runs every selected workload o.rounds times on each path, TCP and
// rdma in turn (the order alternating), and returns the report. A failed
// measurement (an error, a wrong answer) fails the run: the others still
// run, and the error names each failure.
func run(ctx context.Context, o options, out io.Writer) (*report, error) {
	rep := newReport(o)
	var errs []error
	for round := 1; round <= o.rounds; round++ {
		for pi, path := range o.paths {
			if err := runPath(ctx, o, rep, out, round, pi, path); err != nil {
				fmt.Fprintf(out, "round %d %s: FAILED: %v\n", round, path, err)
				errs = append(errs, fmt.Errorf("round %d, path %s: %w", round, path, err))
			}
		}
	}
	rep.summarize()
	return rep, errors.Join(errs...)
}

// order is the transports' order for the i-th measurement of a round.
func order(round, i int) []string {
	if (round+i)%2 == 0 {
		return []string{"tcp", "rdma"}
	}
	return []string{"rdma", "tcp"}
}

func runPath(ctx context.Context, o options, rep *report, out io.Writer, round, pi int, path string) (err error) {
	ps := pathSpecs[path]
	soft.SetSharedMemory(ps.shm)
	env := append([]string{providerEnv + "=" + ps.provider, hostEnv + "=" + o.host}, ps.env...)
	var ch *child
	defer func() {
		if ch != nil {
			err = errors.Join(err, ch.close())
		}
	}()
	var errs []error
	for i, w := range workloads() {
		if !o.selected(w.name) {
			continue
		}
		for _, tn := range order(round, i+pi) {
			if ch == nil {
				if ch, err = startChild(env); err != nil {
					return errors.Join(append(errs, err)...)
				}
			}
			t, err := newTransport(tn, ps.provider, o.host)
			if err != nil {
				return err
			}
			s, err := runOne(ctx, o.sc, w, ch, t)
			if err != nil {
				fmt.Fprintf(out, "round %d %s %s over %s: FAILED: %v\n", round, path, w.name, tn, err)
				errs = append(errs, fmt.Errorf("%s over %s: %w", w.name, tn, err))
				// The server process may be in any state: a new one.
				errs = append(errs, ch.close())
				ch = nil
				continue
			}
			rep.add(out, o, round, path, tn, w.name, s)
		}
	}
	if o.selected("raft") {
		for _, tn := range order(round, pi) {
			a, f, err := runRaft(ctx, o.sc, o.host, ps, tn)
			if err != nil {
				fmt.Fprintf(out, "round %d %s raft over %s: FAILED: %v\n", round, path, tn, err)
				errs = append(errs, fmt.Errorf("raft over %s: %w", tn, err))
				continue
			}
			rep.add(out, o, round, path, tn, "raft-apply", a)
			rep.add(out, o, round, path, tn, "raft-failover", f)
		}
	}
	return errors.Join(errs...)
}

// runOne measures workload w over t against the server process ch.
func runOne(ctx context.Context, sc scale, w workload, ch *child, t *transport) (sample, error) {
	r, err := ch.call(request{Op: "start", Service: w.service, Transport: t.name})
	if err != nil {
		return sample{}, err
	}
	m, err := w.prepare(ctx, sc, t, r.Addr)
	if err != nil {
		_, _ = ch.call(request{Op: "stop"})
		return sample{}, err
	}
	s, err := runMeasure(ctx, m, sc, ch.cpu)
	s.paths = t.paths()
	err = errors.Join(err, m.close())
	if _, serr := ch.call(request{Op: "stop"}); serr != nil {
		err = errors.Join(err, serr)
	}
	return s, err
}

// raftWorkers is how many goroutines apply entries on the leader at once.
const raftWorkers = 16

// runRaft starts three raft nodes, each in a process of its own, over
// transport tn; applies sc.raftEntries entries on the leader (apply: the
// entries' throughput, CPU time of the three processes per entry, commit
// latency), checks that every node applied the same log, then kills the
// leader after sc.raftIdle of heartbeats alone (failover: the time to a
// new leader, p50, and to its first commit, p99 and the elapsed time;
// ops/s is one over it).
func runRaft(ctx context.Context, sc scale, host string, ps pathSpec, tn string) (apply, failover sample, err error) {
	env := append([]string{providerEnv + "=" + ps.provider, hostEnv + "=" + host}, ps.env...)
	nodes := make([]*child, 3)
	defer func() {
		for _, n := range nodes {
			if n != nil {
				err = errors.Join(err, n.close())
			}
		}
	}()
	peers := make([]raftPeer, 3)
	for i := range nodes {
		if nodes[i], err = startChild(env); err != nil {
			return
		}
		peers[i].ID = fmt.Sprintf("n%d", i)
		r, err := nodes[i].call(request{Op: "raft-start", Transport: tn, Raft: &raftArgs{ID: peers[i].ID}})
		if err != nil {
			return apply, failover, err
		}
		peers[i].Addr = r.Addr
	}
	for _, n := range nodes {
		if _, err = n.call(request{Op: "raft-boot", Raft: &raftArgs{Peers: peers, Timeout: sc.raftTimeout}}); err != nil {
			return
		}
	}
	leader, err := raftLeader(nodes, "", 60*time.Second)
	if err != nil {
		return
	}
	cpu := func() (cpuTime, error) {
		var sum cpuTime
		for _, n := range nodes {
			c, err := n.cpu()
			if err != nil {
				return sum, err
			}
			sum = sum.plus(c)
		}
		return sum, nil
	}
	c0, err := cpu()
	if err != nil {
		return
	}
	r, err := nodes[leader].call(request{Op: "raft-apply", Raft: &raftArgs{Entries: sc.raftEntries, Workers: raftWorkers}})
	if err != nil {
		return
	}
	c1, err := cpu()
	if err != nil {
		return
	}
	apply = sample{ops: int64(sc.raftEntries), elapsed: r.Raft.Elapsed, cpu: c1.minus(c0), p50: r.Raft.P50, p99: r.Raft.P99, paths: r.Paths}
	if err = raftAgree(nodes, r.Raft.Applied, 30*time.Second); err != nil {
		return
	}
	if r.Raft.Applied < uint64(sc.raftEntries) {
		return apply, failover, fmt.Errorf("the leader applied %d entries, want at least %d", r.Raft.Applied, sc.raftEntries)
	}

	// The cluster idles (heartbeats only) before the leader dies; the
	// failover row names the leader's connections' paths then.
	time.Sleep(sc.raftIdle)
	st, err := nodes[leader].call(request{Op: "raft-state", Raft: &raftArgs{Paths: true}})
	if err != nil {
		return
	}

	// Failover: the leader dies; the others wait for a new one.
	killed := peers[leader].ID
	nodes[leader].kill()
	killedAt := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var got *raftReply
	var errs []error
	for i, n := range nodes {
		if i == leader {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := n.call(request{Op: "raft-failover", Raft: &raftArgs{Killed: killed, First: sc.raftEntries, DeadlineSec: 60}})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else if r.Raft.CommitAt != 0 {
				if got != nil {
					errs = append(errs, errors.New("two nodes say they are the new leader"))
				}
				got = r.Raft
			}
		}()
	}
	wg.Wait()
	if err = errors.Join(errs...); err != nil {
		return
	}
	if got == nil {
		return apply, failover, errors.New("no node became the leader")
	}
	toLeader := time.Duration(got.LeaderAt - killedAt.UnixNano())
	toCommit := time.Duration(got.CommitAt - killedAt.UnixNano())
	failover = sample{ops: 1, elapsed: toCommit, p50: toLeader, p99: toCommit, paths: st.Paths}
	_ = nodes[leader].close()
	nodes[leader] = nil
	err = raftAgree(nodes, got.Applied, 30*time.Second)
	return
}

// raftLeader waits until one of nodes (other than the one named skip) says
// it is the leader, and returns its index.
func raftLeader(nodes []*child, skip string, limit time.Duration) (int, error) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		for i, n := range nodes {
			if n == nil {
				continue
			}
			r, err := n.call(request{Op: "raft-state", Raft: &raftArgs{}})
			if err != nil {
				return 0, err
			}
			if r.Raft.State == "Leader" {
				return i, nil
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return 0, errors.New("no raft leader in time")
}

// raftAgree waits until every live node applied want entries, and checks
// that their checksums agree.
func raftAgree(nodes []*child, want uint64, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		var hashes []uint32
		done := true
		for _, n := range nodes {
			if n == nil {
				continue
			}
			r, err := n.call(request{Op: "raft-state", Raft: &raftArgs{}})
			if err != nil {
				return err
			}
			if r.Raft.Applied < want {
				done = false
				break
			}
			if r.Raft.Applied > want {
				return fmt.Errorf("a node applied %d entries, more than the leader's %d", r.Raft.Applied, want)
			}
			hashes = append(hashes, r.Raft.Hash)
		}
		if done {
			for _, h := range hashes[1:] {
				if h != hashes[0] {
					return fmt.Errorf("the nodes applied different logs: checksums %x", hashes)
				}
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the nodes did not all apply %d entries in time", want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
