package collectives

// Eager Broadcast. Where some rank has no CPU of its own (more ranks on the
// host than CPUs), a rank that the host runs late sets the time of every
// rank that waits for it. A Broadcast's root waited for every receiver's
// post, so its time was that of the last receiver the host ran (4 ranks on
// 2 CPUs, 256 KiB: the root 600 us where each receiver's copy takes 25).
// A Broadcast that fits in the root's two segment buffers (at most
// shmEagerMax) is therefore eager on its root, as Open MPI's tuned
// broadcast returns once its sends are buffered:
//
//   - The root copies the buffer into its two segment buffers, posts the
//     steps and returns, without waiting for any receiver. It says it is
//     done with the steps (readDone) only at its next step, once it has
//     checked every receiver's post of them (settle): no rank can start
//     the step whose descriptor takes an owed one's place before then
//     (begin), so the receivers' descriptors are still there to check, and
//     the root's buffers are not written again before every receiver has
//     copied out of them.
//   - A receiver runs as in any Broadcast: it waits for the root's post,
//     checks the root's descriptor, copies out and says it is done.
//   - So ranks that disagree still fail with the descriptors' error: a
//     receiver in the Broadcast call itself, the root in its next
//     operation on the group (which fails naming the rank that disagreed).
//     A root that closes the group right after an eager Broadcast checks
//     nothing more: its receivers read what it posted, or fail.
//
// All ranks agree whether Broadcasts are eager (Join's vote), so they all
// run the same steps on the same path (single copy or the segment).

// shmEagerMax is the largest Broadcast that is eager: the root's two
// segment buffers.
const shmEagerMax = 2 * shmChunk

// shmEagerMin is the smallest Broadcast that is eager; below it a root
// that waits for the receivers' posts costs little (a few microseconds)
// and a mismatch fails the Broadcast call itself.
const shmEagerMin = shmYieldBelow

// owedSteps are the steps [from, to] of an eager Broadcast whose root has
// not yet checked the receivers' posts nor said it is done with them.
type owedSteps struct {
	from, to   uint64
	op, nbytes uint64
}

// eagerRoot is a team's eager Broadcast root, a view over the team: the
// state (owed) is the team's.
type eagerRoot struct{ *shmTeam }

// fits says whether a Broadcast of nbytes is eager.
func (t eagerRoot) fits(nbytes int) bool {
	return t.eager && nbytes >= shmEagerMin && nbytes <= shmEagerMax
}

// broadcast is the root's side: buf into the segment a chunk a step, each
// step posted, and no wait but begin's (the steps of two operations ago).
func (t eagerRoot) broadcast(g *Group, buf []byte) error {
	t.expect(len(buf))
	op, nb := opWord(g.cur), uint64(len(buf))
	var first uint64
	for i, steps := 0, chunks(len(buf), shmChunk); i < steps; i++ {
		lo := i * shmChunk
		hi := min(len(buf), lo+shmChunk)
		k, mine, err := t.begin(g)
		if err != nil {
			return err
		}
		if i == 0 {
			first = k
		}
		copy(mine, buf[lo:hi])
		t.post(k, op, nb)
	}
	t.owed = owedSteps{from: first, to: t.step, op: op, nbytes: nb}
	return nil
}

// settle checks every receiver's post of the owed steps, and says this
// rank is done with them. A receiver cannot post the step that takes an
// owed step's descriptor's place before then.
func (t eagerRoot) settle(g *Group) error {
	o := t.owed
	t.owed = owedSteps{}
	for k := o.from; k <= o.to; k++ {
		if err := t.waitAll(g, k, o.op, o.nbytes); err != nil {
			return err
		}
	}
	t.done(o.to)
	return nil
}
