package collectives

import "slices"

// Hierarchical AllReduce, for a group that spans hosts where the ranks of
// a host share a segment (Join sets it up as for a one-host group, per
// host): the host's ranks reduce into their leader (the host's lowest
// rank) through the segment, the leaders all-reduce over their conns (a
// ring: reduce-scatter then all-gather, each block computed once), and
// each leader broadcasts the result to its host through the segment. Only
// the leaders' data crosses hosts, once each way per byte, instead of
// every rank's. Every rank gets the leaders' result, bit for bit.
//
// Where every host has the same number of ranks and they can read each
// other's memory (shm_single.go), a large AllReduce splits the work among
// all of them, as NCCL's rings do: the host's ranks reduce-scatter through
// single copies (local rank j computes block j of the host's sum), each
// rank all-reduces its block with the ranks of the same local index on the
// other hosts (its counterparts), all pairs of hosts' links at once, and the
// host's ranks all-gather the blocks. Each host link then carries 1/L of
// the data, L streams side by side. A large Broadcast, AllGather or
// AllToAll takes the same paths: between hosts only from counterpart to
// counterpart (or, for AllToAll, to the other hosts' ranks), within a host
// by single copies; small ones run over the conns.

// hierarchy is this rank's place in a group spread over hosts.
type hierarchy struct {
	team    *shmTeam // this host's ranks; nil when this rank is alone on its host
	leaders []int    // each host's lowest rank, ascending
	lead    int      // this rank's index in leaders, or -1
	// peers: the ranks with this rank's index on their host, one a host in
	// the leaders' order, when every host has as many ranks as this one
	// (nil otherwise); hostIdx is this rank's host's index in it.
	peers   []int
	hostIdx int
	// members: each host's ranks, ascending, in the leaders' order.
	members [][]int
	// split: every rank agreed to split large AllReduces (see above);
	// pieces is splitPiecesEnv's setting (0: by size, hier_pipe.go).
	split  bool
	pieces int
}

// newHierarchy places rank among hosts, given each rank's host (equal
// values: same host) and this host's team (nil if alone).
func newHierarchy[K comparable](host []K, rank int, team *shmTeam) *hierarchy {
	h := &hierarchy{team: team, lead: -1, pieces: splitPiecesFromEnv()}
	index := make(map[K]int) // host -> its index in leaders
	var members [][]int      // each host's ranks, ascending
	for r, k := range host {
		i, seen := index[k]
		if !seen {
			i = len(h.leaders)
			index[k] = i
			if r == rank {
				h.lead = i
			}
			h.leaders = append(h.leaders, r)
			members = append(members, nil)
		}
		members[i] = append(members[i], r)
	}
	h.members = members
	h.hostIdx = index[host[rank]]
	local := -1
	for j, r := range members[h.hostIdx] {
		if r == rank {
			local = j
		}
	}
	for _, m := range members {
		if len(m) != len(members[h.hostIdx]) {
			return h
		}
	}
	h.peers = make([]int, len(members))
	for i, m := range members {
		h.peers[i] = m[local]
	}
	return h
}

// canSplit is this rank's vote on split: every host as big as this one,
// with a team whose members can read each other's memory.
func (h *hierarchy) canSplit() int32 {
	if h.peers == nil || h.team == nil {
		return 0
	}
	return h.team.probeSingleCopy()
}

// allReduce runs AllReduce of send into recv (g.red) over h.
func (h *hierarchy) allReduce(g *Group, send, recv []byte) error {
	if h.split && len(send)/h.team.n >= shmSingleMin {
		return h.allReduceSplit(g, send, recv)
	}
	if h.team != nil {
		if err := h.team.reduceTo(g, 0, send, recv); err != nil {
			return err
		}
	} else {
		copy(recv, send)
	}
	if h.lead >= 0 && len(h.leaders) > 1 {
		if err := allReduceAmong(g, h.leaders, h.lead, recv); err != nil {
			return err
		}
	}
	if h.team != nil {
		return h.team.broadcast(g, 0, recv)
	}
	return nil
}

// allReduceAmong all-reduces buf among the ranks members (this rank is
// members[me]) over their conns. With fewer elements than members, the
// first member combines the others' in member order and sends the result
// back; else a ring reduce-scatter and all-gather.
func allReduceAmong(g *Group, members []int, me int, buf []byte) error {
	m := len(members)
	if len(buf)/g.red.elem < m {
		if me != 0 {
			if err := g.send(members[0], 0, buf); err != nil {
				return err
			}
			if err := g.waitSends(); err != nil {
				return err
			}
			return g.recv(members[0], 1, buf)
		}
		for i := 1; i < m; i++ {
			if err := g.recvReduce(members[i], 0, buf, false); err != nil {
				return err
			}
		}
		for i := 1; i < m; i++ {
			if err := g.send(members[i], 1, buf); err != nil {
				return err
			}
		}
		return g.waitSends()
	}
	block := func(i int) []byte {
		e := g.red.elem
		lo, hi := blockRange(len(buf)/e, m, mod(i, m))
		return buf[lo*e : hi*e]
	}
	right, left := members[mod(me+1, m)], members[mod(me-1, m)]
	for s := 0; s < m-1; s++ {
		if err := g.send(right, uint32(s), block(me-s)); err != nil {
			return err
		}
		if err := g.recvReduce(left, uint32(s), block(me-s-1), true); err != nil {
			return err
		}
		if err := g.waitSends(); err != nil {
			return err
		}
	}
	for s := 0; s < m-1; s++ {
		if err := g.exchange(right, left, uint32(m+s), block(me+1-s), block(me-s)); err != nil {
			return err
		}
	}
	return nil
}

// allReduceSplit: reduce-scatter on the host, all-reduce of this rank's
// block with its counterparts, all-gather on the host (see above), in
// pieces whose stages overlap (hier_pipe.go).
func (h *hierarchy) allReduceSplit(g *Group, send, recv []byte) error {
	p := splitPipeline{}
	p.init(g, h, send, recv, splitPiecesFor(len(recv), h.pieces))
	return p.run()
}

// allGather, where the split is agreed (as for AllReduce): each rank's
// block goes round the ring of its counterparts, one a host (each block
// crosses between two hosts once, instead of once per host the group's
// ring passes), then the host's ranks copy each other's counterparts'
// blocks once (singleCopy.gatherCounterparts). recv already holds this
// rank's own block.
func (h *hierarchy) allGather(g *Group, recv []byte, blk int) error {
	m, me := len(h.peers), h.hostIdx
	right, left := h.peers[mod(me+1, m)], h.peers[mod(me-1, m)]
	block := func(i int) []byte {
		r := h.peers[mod(i, m)]
		return recv[r*blk : (r+1)*blk]
	}
	for s := 0; s < m-1; s++ {
		if err := g.exchange(right, left, uint32(s), block(me-s), block(me-s-1)); err != nil {
			return err
		}
	}
	defer h.team.unlend()
	return h.team.copyOnce().gatherCounterparts(g, recv, blk, h.members)
}

// broadcast, where the split is agreed: the parts of buf, one per local
// index, cross between hosts side by side. On the root's host each rank
// reads its part from the root, sends it to its counterparts on the other
// hosts, then reads the other parts from the root while those sends are
// under way; on the other hosts each rank receives its part from its
// counterpart on the root's host, and the host's ranks copy each other's
// parts once.
func (h *hierarchy) broadcast(g *Group, root int, buf []byte) error {
	t := h.team.copyOnce()
	defer t.unlend()
	rootHost, rootLocal := h.placeOf(root)
	lo, hi := blockRange(len(buf), t.n, t.me)
	part := buf[lo:hi]
	if h.hostIdx != rootHost {
		if err := g.recv(h.members[rootHost][t.me], 0, part); err != nil {
			return err
		}
		return t.readParts(g, buf, -1, partsOfOwners)
	}
	if err := t.readParts(g, buf, rootLocal, partOwn); err != nil {
		return err
	}
	for i, host := range h.members {
		if i != rootHost {
			if err := g.send(host[t.me], 0, part); err != nil {
				return err
			}
		}
	}
	if err := t.readParts(g, buf, rootLocal, partsButOwn); err != nil {
		return err
	}
	return g.waitSends()
}

// placeOf is rank r's host (its index in leaders) and its index there.
func (h *hierarchy) placeOf(r int) (host, local int) {
	for i, m := range h.members {
		for j, q := range m {
			if q == r {
				return i, j
			}
		}
	}
	return -1, -1
}

// allToAll, where the split is agreed: the blocks for the other hosts'
// ranks are posted to their links first, the host's ranks copy the blocks
// they have for each other once (singleCopy.allToAll) while those are
// under way, and the other hosts' blocks are received last, in the
// pairwise order.
func (h *hierarchy) allToAll(g *Group, send, recv []byte, blk int) error {
	n, r, mine := g.size, g.rank, h.members[h.hostIdx]
	onHost := func(q int) bool { return slices.Contains(mine, q) }
	for k := 1; k < n; k++ {
		if to := mod(r+k, n); !onHost(to) {
			if err := g.send(to, 0, send[to*blk:(to+1)*blk]); err != nil {
				return err
			}
		}
	}
	t := h.team.copyOnce()
	if err := t.gatherBlocks(g, send, recv, blk, uint64(r*blk)); err != nil {
		return err
	}
	for k := 1; k < n; k++ {
		if from := mod(r-k, n); !onHost(from) {
			if err := g.recv(from, 0, recv[from*blk:(from+1)*blk]); err != nil {
				return err
			}
		}
	}
	return g.waitSends()
}
