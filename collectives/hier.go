package collectives

// Hierarchical AllReduce, for a group that spans hosts where the ranks of
// a host share a segment (Join sets it up as for a one-host group, per
// host): the host's ranks reduce into their leader (the host's lowest
// rank) through the segment, the leaders all-reduce over their conns (a
// ring: reduce-scatter then all-gather, each block computed once), and
// each leader broadcasts the result to its host through the segment. Only
// the leaders' data crosses hosts, once each way per byte, instead of
// every rank's. Every rank gets the leaders' result, bit for bit.

// hierarchy is this rank's place in a group spread over hosts.
type hierarchy struct {
	team    *shmTeam // this host's ranks; nil when this rank is alone on its host
	leaders []int    // each host's lowest rank, ascending
	lead    int      // this rank's index in leaders, or -1
}

// newHierarchy places rank among hosts, given each rank's host (equal
// values: same host) and this host's team (nil if alone).
func newHierarchy[K comparable](host []K, rank int, team *shmTeam) *hierarchy {
	h := &hierarchy{team: team, lead: -1}
	seen := make(map[K]bool)
	for r, k := range host {
		if !seen[k] {
			seen[k] = true
			if r == rank {
				h.lead = len(h.leaders)
			}
			h.leaders = append(h.leaders, r)
		}
	}
	return h
}

// hierAllReduce runs AllReduce of send into recv (g.red) over g.hier.
func (g *Group) hierAllReduce(send, recv []byte) error {
	h := g.hier
	if h.team != nil {
		if err := g.shmReduceTo(h.team, 0, send, recv); err != nil {
			return err
		}
	} else {
		copy(recv, send)
	}
	if h.lead >= 0 && len(h.leaders) > 1 {
		if err := g.allReduceAmong(h.leaders, h.lead, recv); err != nil {
			return err
		}
	}
	if h.team != nil {
		return g.shmBroadcast(h.team, 0, recv)
	}
	return nil
}

// allReduceAmong all-reduces buf among the ranks members (this rank is
// members[me]) over their conns. With fewer elements than members, the
// first member combines the others' in member order and sends the result
// back; else a ring reduce-scatter and all-gather.
func (g *Group) allReduceAmong(members []int, me int, buf []byte) error {
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
