#!/bin/sh
# bench-netns.sh: 2 "hosts" x 2 ranks in network namespaces of its own.
#
#   cmd/rdmacoll/mpi/bench-netns.sh OUTDIR     (as root; after bench-mpi.sh built OUTDIR)
#
# Makes two namespaces joined by a veth pair, addresses 127.199.46.1 and
# 127.199.46.2 on the veth ends (127/8 on a wire, with route_localnet, lo
# without its 127/8 route: nothing outside the two namespaces is ever
# addressed), runs rdmacoll
# (the ranks are on two hosts: AllReduce is hierarchical, a shared segment
# per namespace and the conns between them, a large one split among all
# four ranks, and large Broadcasts, AllGathers and AllToAlls likewise cross between hosts only from counterpart to counterpart; RDMA_COLL_ALGO=stream keeps all on the conns) and Open MPI's program with
# its TCP BTL on 4 ranks, ranks 0 and 2 in the first namespace, 1 and 3 in
# the second, COLL_ROUNDS rounds, and prints the ratio. The namespaces are
# removed on exit. Open MPI's ranks cannot start inside the namespaces this
# way (their PMIx client reaches mpirun's server over the root namespace's
# loopback, which a namespace does not see): with COLL_NETNS_MPI unset,
# only rdmacoll runs (under rdmarun, OUTDIR/rdmarun), and its figures stand
# beside bench-mpi.sh's loopback TCP BTL run (mpitcp-n4-r*.txt) instead.
set -eu
out=${1:?usage: bench-netns.sh OUTDIR}
COLL_ROUNDS=${COLL_ROUNDS:-3}
COLL_ITERS=${COLL_ITERS:-20}
COLL_SIZES=${COLL_SIZES:-4M,16M}
ns=rdmacoll$$
cleanup() { ip netns del "${ns}a" 2>/dev/null || true; ip netns del "${ns}b" 2>/dev/null || true; }
trap cleanup EXIT INT TERM
ip netns add "${ns}a"
ip netns add "${ns}b"
ip link add "${ns}va" type veth peer name "${ns}vb"
for h in a b; do
	ip link set "${ns}v$h" netns "$ns$h"
	ip -n "$ns$h" link set "${ns}v$h" name eth0
	ip netns exec "$ns$h" sysctl -qw net.ipv4.conf.all.route_localnet=1 \
		net.ipv4.conf.default.route_localnet=1 net.ipv4.conf.eth0.route_localnet=1
	ip -n "$ns$h" link set eth0 up
done
ip -n "${ns}a" addr add 127.199.46.1/24 dev eth0
ip -n "${ns}b" addr add 127.199.46.2/24 dev eth0
# Two ranks of a host reach each other through lo: up, but without its
# 127.0.0.0/8 route, so that the other host's 127.199.46.x goes over eth0.
for h in a b; do
	ip -n "$ns$h" link set lo up
	ip -n "$ns$h" route del local 127.0.0.0/8 dev lo table local
done
asroot=
if [ "$(id -u)" = 0 ]; then asroot=--allow-run-as-root; fi
# Rank r runs in namespace a (r even) or b (r odd), as RDMA_RANK or Open
# MPI's rank variable says.
wrap='r=${RDMA_RANK:-$OMPI_COMM_WORLD_RANK}; if [ $((r % 2)) = 0 ]; then h=a; ip=127.199.46.1; else h=b; ip=127.199.46.2; fi; RDMA_LOCAL_ADDR=$ip exec ip netns exec '"$ns"'$h "$@"'
base= this=
for r in $(seq 1 "$COLL_ROUNDS"); do
	mf="$out/mpitcp-netns-r$r.txt" rf="$out/conns-netns-r$r.txt"
	if [ -n "${COLL_NETNS_MPI:-}" ]; then
		# shellcheck disable=SC2086
		mpirun $asroot --oversubscribe --bind-to none -n 4 --mca btl tcp,self --mca btl_tcp_if_include eth0 \
			sh -c "$wrap" wrap "$out/collmpi" -sizes "$COLL_SIZES" -iters "$COLL_ITERS" -check >"$mf"
		base="${base:+$base,}$mf"
	fi
	"$out/rdmarun" -n 4 -root 127.199.46.1:$((29600 + r)) -hosts 127.199.46.1,127.199.46.2 -- \
		sh -c "$wrap" wrap "$out/rdmacoll" -sizes "$COLL_SIZES" -iters "$COLL_ITERS" -check | sed 's/^\[0\] //' >"$rf"
	this="${this:+$this,}$rf"
done
if [ -z "$base" ]; then base=$(ls "$out"/mpitcp-n4-r*.txt | paste -sd, -); fi
echo "# 2 network-namespace hosts x 2 ranks: collectives (${RDMA_COLL_ALGO:-auto}) beside Open MPI's TCP BTL ($base), $COLL_ROUNDS rounds"
"$out/rdmacoll" -compare "$base" "$this" | tee "$out/ratio-netns.txt"
