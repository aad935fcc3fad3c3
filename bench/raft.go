package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// raftArgs and raftReply are the raft requests' fields and answers.
type raftArgs struct {
	ID          string        `json:"id,omitempty"`
	Peers       []raftPeer    `json:"peers,omitempty"`
	Entries     int           `json:"entries,omitempty"`
	Workers     int           `json:"workers,omitempty"`
	First       int           `json:"first,omitempty"` // the first entry's number
	Timeout     time.Duration `json:"timeout,omitempty"`
	Killed      string        `json:"killed,omitempty"` // the stopped leader's ID
	DeadlineSec int           `json:"deadline_sec,omitempty"`
	Paths       bool          `json:"paths,omitempty"` // raft-state: with the paths of the node's connections
}

type raftPeer struct {
	ID   string `json:"id"`
	Addr string `json:"addr"`
}

type raftReply struct {
	State    string        `json:"state,omitempty"`
	LeaderID string        `json:"leader_id,omitempty"`
	Applied  uint64        `json:"applied,omitempty"`
	Hash     uint32        `json:"hash,omitempty"`
	Elapsed  time.Duration `json:"elapsed,omitempty"`
	P50      time.Duration `json:"p50,omitempty"`
	P99      time.Duration `json:"p99,omitempty"`
	LeaderAt int64         `json:"leader_at,omitempty"` // Unix ns
	CommitAt int64         `json:"commit_at,omitempty"` // Unix ns
}

// Entry sizes: every raftBigEvery-th entry is raftBigSize bytes, the rest
// raftSmallSize.
const (
	raftBigEvery  = 10
	raftBigSize   = 64 << 10
	raftSmallSize = 128
)

// raftEntry is entry i's content: its number, then a pattern of it.
func raftEntry(i int) []byte {
	n := raftSmallSize
	if i%raftBigEvery == 0 {
		n = raftBigSize
	}
	b := make([]byte, n)
	binary.LittleEndian.PutUint64(b, uint64(i))
	for j := 8; j < n; j++ {
		b[j] = byte(i + j*3)
	}
	return b
}

// hashFSM applies entries into a chained checksum of all of them, in log
// order, and a count: equal on every node once each applied the same log.
type hashFSM struct {
	mu   sync.Mutex
	n    uint64
	hash uint32
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func (f *hashFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	f.hash = crc32.Update(f.hash, castagnoli, l.Data)
	return len(l.Data)
}

func (f *hashFSM) state() (uint64, uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n, f.hash
}

func (f *hashFSM) Snapshot() (raft.FSMSnapshot, error) {
	n, h := f.state()
	return fsmSnapshot{n, h}, nil
}

func (f *hashFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var b [12]byte
	if _, err := io.ReadFull(rc, b[:]); err != nil {
		return err
	}
	f.mu.Lock()
	f.n, f.hash = binary.LittleEndian.Uint64(b[:]), binary.LittleEndian.Uint32(b[8:])
	f.mu.Unlock()
	return nil
}

type fsmSnapshot struct {
	n    uint64
	hash uint32
}

func (s fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	var b [12]byte
	binary.LittleEndian.PutUint64(b[:], s.n)
	binary.LittleEndian.PutUint32(b[8:], s.hash)
	if _, err := sink.Write(b[:]); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (fsmSnapshot) Release() {}

// streamLayer is raft's StreamLayer on a bench transport.
type streamLayer struct {
	net.Listener
	t *transport
}

func (l *streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return l.t.dial(ctx, string(addr))
}

// raftNode is a server process's raft node.
type raftNode struct {
	id    string
	layer *streamLayer
	fsm   *hashFSM
	trans *raft.NetworkTransport
	r     *raft.Raft
}

func (s *server) raftOp(req request) reply {
	a := req.Raft
	if a == nil {
		return reply{Err: "raft request without its arguments"}
	}
	if req.Op == "raft-start" {
		if s.raft != nil {
			return reply{Err: "raft node already started"}
		}
		t, ln, err := s.listen(req.Transport)
		if err != nil {
			return reply{Err: err.Error()}
		}
		s.raft = &raftNode{id: a.ID, layer: &streamLayer{Listener: ln, t: t}, fsm: &hashFSM{}}
		return reply{Addr: ln.Addr().String()}
	}
	n := s.raft
	if n == nil {
		return reply{Err: "no raft node"}
	}
	var rr raftReply
	var err error
	switch req.Op {
	case "raft-boot":
		err = n.boot(a)
	case "raft-state":
		rr = n.state()
	case "raft-apply":
		rr, err = n.apply(a)
	case "raft-failover":
		rr, err = n.failover(a)
	}
	if err != nil {
		return reply{Err: err.Error()}
	}
	r := reply{Raft: &rr}
	if req.Op == "raft-apply" || req.Op == "raft-state" && a.Paths {
		r.Paths = n.layer.t.peekPaths()
	}
	return r
}

func (n *raftNode) boot(a *raftArgs) error {
	cfg := raft.DefaultConfig()
	cfg.LocalID = raft.ServerID(n.id)
	cfg.Logger = hclog.NewNullLogger()
	if a.Timeout > 0 {
		cfg.HeartbeatTimeout = a.Timeout
		cfg.ElectionTimeout = a.Timeout
		cfg.LeaderLeaseTimeout = a.Timeout / 2
	}
	store := raft.NewInmemStore()
	n.trans = raft.NewNetworkTransportWithLogger(n.layer, 3, 10*time.Second, hclog.NewNullLogger())
	r, err := raft.NewRaft(cfg, n.fsm, store, store, raft.NewInmemSnapshotStore(), n.trans)
	if err != nil {
		return err
	}
	n.r = r
	var c raft.Configuration
	for _, p := range a.Peers {
		c.Servers = append(c.Servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Addr)})
	}
	return r.BootstrapCluster(c).Error()
}

func (n *raftNode) state() raftReply {
	rr := raftReply{State: "none"}
	if n.r != nil {
		rr.State = n.r.State().String()
		_, id := n.r.LeaderWithID()
		rr.LeaderID = string(id)
	}
	rr.Applied, rr.Hash = n.fsm.state()
	return rr
}

// apply applies entries First..First+Entries-1 from Workers goroutines,
// each waiting for its entry to commit before the next; every result is
// the entry's length.
func (n *raftNode) apply(a *raftArgs) (raftReply, error) {
	if n.r == nil || n.r.State() != raft.Leader {
		return raftReply{}, errors.New("not the leader")
	}
	workers := max(a.Workers, 1)
	var lat latencies
	var wg sync.WaitGroup
	errs := make([]error, workers)
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var d []time.Duration
			defer func() { lat.add(d) }()
			for i := a.First + w; i < a.First+a.Entries; i += workers {
				data := raftEntry(i)
				t := time.Now()
				f := n.r.Apply(data, 30*time.Second)
				if err := f.Error(); err != nil {
					errs[w] = fmt.Errorf("entry %d: %w", i, err)
					return
				}
				if got, ok := f.Response().(int); !ok || got != len(data) {
					errs[w] = fmt.Errorf("entry %d: applied as %v, want its length %d", i, f.Response(), len(data))
					return
				}
				d = append(d, time.Since(t))
			}
		}()
	}
	wg.Wait()
	rr := n.state()
	rr.Elapsed = time.Since(start)
	rr.P50, rr.P99 = lat.quantiles()
	return rr, errors.Join(errs...)
}

// failover waits (at most DeadlineSec) until this node is the leader, or
// another than the killed one is. The leader then applies entry First and
// says when it saw itself leader and when the entry committed.
func (n *raftNode) failover(a *raftArgs) (raftReply, error) {
	deadline := time.Now().Add(time.Duration(max(a.DeadlineSec, 1)) * time.Second)
	for time.Now().Before(deadline) {
		if n.r.State() == raft.Leader {
			leaderAt := time.Now()
			data := raftEntry(a.First)
			f := n.r.Apply(data, 30*time.Second)
			if err := f.Error(); err != nil {
				return raftReply{}, err
			}
			if got, ok := f.Response().(int); !ok || got != len(data) {
				return raftReply{}, fmt.Errorf("entry %d: applied as %v", a.First, f.Response())
			}
			rr := n.state()
			rr.LeaderAt, rr.CommitAt = leaderAt.UnixNano(), time.Now().UnixNano()
			return rr, nil
		}
		if _, id := n.r.LeaderWithID(); id != "" && string(id) != a.Killed {
			return n.state(), nil
		}
		time.Sleep(time.Millisecond)
	}
	return raftReply{}, errors.New("no new leader in time")
}

func (n *raftNode) shutdown() error {
	var err error
	if n.r != nil {
		err = n.r.Shutdown().Error()
	}
	if n.trans != nil {
		err = errors.Join(err, n.trans.Close())
	} else {
		err = errors.Join(err, n.layer.Close())
	}
	return err
}
