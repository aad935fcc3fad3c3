package collectives

import (
	"os"
	"strconv"
)

// The split AllReduce in pieces. Its three stages (reduce-scatter on the
// host, all-reduce of the rank's block with its counterparts on the other
// hosts, all-gather on the host) use different resources: the first and
// last the host's memory and its ranks together, the middle one the links
// between hosts and their sending goroutines. Run one after another, each
// stage waits while the others' resources idle: at 4 MiB on two hosts the
// host stages were 2-4 ms of 8-9 (docs/measurements). So a large one goes
// in pieces (splitPiecesFor), each through the three stages, the stages of
// neighbouring pieces overlapping as in NCCL's pipelined rings: while
// piece p's blocks cross between hosts (posted to the link goroutines,
// the counterparts' data arriving in the conns), this rank reduce-scatters
// piece p+1 on its host, and all-gathers piece p-1 while p's second ring
// step is under way. The overlap pays where a link moves data without
// the CPUs that the host steps use (a NIC); with two "hosts" in network
// namespaces of one 2-CPU machine, where every stage takes CPU from the
// others, 1, 2 and 4 pieces measured the same within the rounds' scatter
// at 16 MiB, and 4 a little slower than 2 at 4 MiB (docs/measurements).
//
// Every rank runs the same sequence of host steps, posts and receives, and
// a post never waits for the peer's receive (it goes to the link's
// goroutine), so no rank waits for one that waits for it. Each element is
// combined exactly as without pieces (in member order on the host, then
// along the ring), so the result is the same bits.

const (
	// splitPieceMin is the least size of a piece: below it a piece's two
	// host steps and ring steps cost more in synchronisation than the
	// overlap saves.
	splitPieceMin = 2 << 20
	// splitPiecesMax bounds the pieces of one operation.
	splitPiecesMax = 4
	// splitPiecesEnv sets the number of pieces (1: no pipeline), for
	// comparison.
	splitPiecesEnv = "RDMA_COLL_PIECES"
)

// splitPiecesFor is how many pieces an nbytes split AllReduce goes in:
// one per splitPieceMin, at most splitPiecesMax, unless the environment
// says otherwise (read once, at Join: every rank of a job gets the same).
func splitPiecesFor(nbytes, set int) int {
	if set > 0 {
		return max(1, min(set, nbytes>>16))
	}
	return max(1, min(splitPiecesMax, nbytes/splitPieceMin))
}

// splitPiecesFromEnv is the setting of splitPiecesEnv, 0 when unset or bad.
func splitPiecesFromEnv() int {
	n, err := strconv.Atoi(os.Getenv(splitPiecesEnv))
	if err != nil || n < 1 {
		return 0
	}
	return n
}

// splitPipeline is one split AllReduce in pieces: the buffers, where each
// piece is, and the ring between hosts that this rank's blocks go round.
type splitPipeline struct {
	g          *Group
	t          singleCopy
	send, recv []byte
	pieces     int
	// The ring among the hosts: this rank's counterparts, one a host.
	hosts, me   int // the ring's members, this rank's index in it
	right, left int // ranks
	steps       int // ring steps a piece: reduce-scatter, then all-gather
}

// init sets s up for one operation (a value on the caller's stack: no
// allocation an operation).
func (s *splitPipeline) init(g *Group, h *hierarchy, send, recv []byte, pieces int) {
	m := len(h.peers)
	*s = splitPipeline{
		g: g, t: h.team.copyOnce(), send: send, recv: recv, pieces: pieces,
		hosts: m, me: h.hostIdx,
		right: h.peers[mod(h.hostIdx+1, m)], left: h.peers[mod(h.hostIdx-1, m)],
		steps: 2 * (m - 1),
	}
}

// piece is piece p's part [lo, hi) of the buffers, in bytes.
func (s *splitPipeline) piece(p int) (lo, hi int) {
	e := s.g.red.elem
	lo, hi = blockRange(len(s.recv)/e, s.pieces, p)
	return lo * e, hi * e
}

// ringBlock is block i of this rank's block of piece p (the part of the
// host's result it computes), split among the hosts.
func (s *splitPipeline) ringBlock(p, i int) []byte {
	lo, hi := s.piece(p)
	e := s.g.red.elem
	blo, bhi := singleBlock(hi-lo, e, s.t.n, s.t.me)
	mine := s.recv[lo+blo : lo+bhi]
	rlo, rhi := blockRange(len(mine)/e, s.hosts, mod(i, s.hosts))
	return mine[rlo*e : rhi*e]
}

// tag is the frame tag of piece p's ring step k.
func (s *splitPipeline) tag(p, k int) uint32 { return uint32(p*s.steps + k) }

// post sends piece p's ring step k: in the reduce-scatter the block this
// rank has combined so far, in the all-gather one it has complete.
func (s *splitPipeline) post(p, k int) error {
	i := s.me - k
	if k >= s.hosts-1 {
		i = s.me + 1 - (k - (s.hosts - 1))
	}
	return s.g.send(s.right, s.tag(p, k), s.ringBlock(p, i))
}

// finish receives piece p's ring step k from the left, once every send
// but the last one posted has been written (a block received in the
// all-gather is one this rank sent in the reduce-scatter).
func (s *splitPipeline) finish(p, k int) error {
	l, err := s.g.peer(s.right)
	if err != nil {
		return err
	}
	for l.pending > 1 {
		if err := s.g.waitOne(l); err != nil {
			return err
		}
	}
	if k < s.hosts-1 {
		return s.g.recvReduce(s.left, s.tag(p, k), s.ringBlock(p, s.me-k-1), true)
	}
	return s.g.recv(s.left, s.tag(p, k), s.ringBlock(p, s.me-(k-(s.hosts-1))))
}

// reduceScatter and allGather are piece p's steps on the host.
func (s *splitPipeline) reduceScatter(p int) error {
	lo, hi := s.piece(p)
	return s.t.reduceScatter(s.g, s.send[lo:hi], s.recv[lo:hi], false)
}

func (s *splitPipeline) allGather(p int) error {
	lo, hi := s.piece(p)
	return s.t.allGatherBlocks(s.g, s.recv[lo:hi])
}

// run is the whole operation: piece p+1's host reduce-scatter while p's
// first ring step is in flight, p-1's host all-gather while p's second
// is, and the next piece's first ring step posted as soon as p's ring is
// done.
func (s *splitPipeline) run() error {
	defer s.t.unlend()
	if err := s.reduceScatter(0); err != nil {
		return err
	}
	if err := s.post(0, 0); err != nil {
		return err
	}
	for p := range s.pieces {
		if p+1 < s.pieces {
			if err := s.reduceScatter(p + 1); err != nil {
				return err
			}
		}
		for k := range s.steps {
			if err := s.finish(p, k); err != nil {
				return err
			}
			switch {
			case k+1 < s.steps:
				if err := s.post(p, k+1); err != nil {
					return err
				}
			case p+1 < s.pieces:
				if err := s.post(p+1, 0); err != nil {
					return err
				}
			}
			if k == 0 && p > 0 {
				if err := s.allGather(p - 1); err != nil {
					return err
				}
			}
		}
	}
	if err := s.allGather(s.pieces - 1); err != nil {
		return err
	}
	return s.g.waitSends()
}
