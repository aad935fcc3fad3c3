#!/bin/sh
# bench-netns.sh: 2 "hosts" x 2 ranks in network namespaces of its own.
#
#   cmd/rdmacoll/mpi/bench-netns.sh OUTDIR     (as root; after bench-mpi.sh built OUTDIR)
#
# Makes two namespaces, the hosts, joined by a veth pair (eth0, addresses
# 127.199.46.1 and 127.199.46.2: 127/8 on a wire, with route_localnet, lo
# without its 127/8 route), and a third in which mpirun runs, joined to
# each host by a veth of its own (mgmt, 127.199.47.0/30 and .4/30): Open
# MPI's ranks reach mpirun's PMIx server there, which listens on those
# links (PMIx's ptl_tcp_remote_connections), and carry their data over
# eth0 with the TCP BTL. Nothing outside the three namespaces is ever
# addressed. Ranks 0 and 2 run in the first host, 1 and 3 in the second,
# Open MPI's (collmpi) and this project's (rdmacoll under rdmarun) in turn,
# COLL_ROUNDS rounds, and the ratio is printed. rdmacoll's group spans two
# hosts: a segment per host and the conns between them; AllReduce is
# hierarchical (a large one split among all four ranks, in pieces), and
# large Broadcasts, AllGathers and AllToAlls cross between hosts only from
# counterpart to counterpart (RDMA_COLL_ALGO=stream keeps all on the
# conns). The namespaces are removed on exit. COLL_MTU sets the links'
# MTU (default 1500).
set -eu
out=${1:?usage: bench-netns.sh OUTDIR}
COLL_ROUNDS=${COLL_ROUNDS:-3}
COLL_ITERS=${COLL_ITERS:-20}
COLL_SIZES=${COLL_SIZES:-4M,16M}
COLL_MTU=${COLL_MTU:-1500}
ns=rdmacoll$$
cleanup() { for h in a b c; do ip netns del "$ns$h" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM
for h in a b c; do
	ip netns add "$ns$h"
	ip netns exec "$ns$h" sysctl -qw net.ipv4.conf.all.route_localnet=1 net.ipv4.conf.default.route_localnet=1
	# lo up, but without its 127.0.0.0/8 route, so that 127.199.x.y of
	# another namespace goes over a link.
	ip -n "$ns$h" link set lo up
	ip -n "$ns$h" route del local 127.0.0.0/8 dev lo table local
done
# link NS IFNAME PEERNS PEERIFNAME: a veth pair between two namespaces.
link() {
	ip link add "${ns}x" type veth peer name "${ns}y"
	ip link set "${ns}x" netns "$ns$1"
	ip link set "${ns}y" netns "$ns$3"
	ip -n "$ns$1" link set "${ns}x" name "$2"
	ip -n "$ns$3" link set "${ns}y" name "$4"
	for end in "$1 $2" "$3 $4"; do
		set -- $end
		ip netns exec "$ns$1" sysctl -qw "net.ipv4.conf.$2.route_localnet=1"
		ip -n "$ns$1" link set "$2" mtu "$COLL_MTU" up
	done
}
link a eth0 b eth0
link a mgmt c mga
link b mgmt c mgb
ip -n "${ns}a" addr add 127.199.46.1/24 dev eth0
ip -n "${ns}b" addr add 127.199.46.2/24 dev eth0
ip -n "${ns}c" addr add 127.199.47.1/30 dev mga
ip -n "${ns}a" addr add 127.199.47.2/30 dev mgmt
ip -n "${ns}c" addr add 127.199.47.5/30 dev mgb
ip -n "${ns}b" addr add 127.199.47.6/30 dev mgmt
# mpirun's PMIx server advertises one address (mga's): host b reaches it
# over its own mgmt link.
ip -n "${ns}b" route add 127.199.47.1/32 dev mgmt
asroot=
if [ "$(id -u)" = 0 ]; then asroot=--allow-run-as-root; fi
# Rank r runs in namespace a (r even) or b (r odd), as RDMA_RANK or Open
# MPI's rank variable says.
wrap='r=${RDMA_RANK:-$OMPI_COMM_WORLD_RANK}; if [ $((r % 2)) = 0 ]; then h=a; ip=127.199.46.1; else h=b; ip=127.199.46.2; fi; RDMA_LOCAL_ADDR=$ip exec ip netns exec '"$ns"'$h "$@"'
export PMIX_MCA_ptl_tcp_remote_connections=1 PMIX_MCA_ptl_tcp_if_include=mga,mgb
base= this=
for r in $(seq 1 "$COLL_ROUNDS"); do
	mf="$out/mpitcp-netns-r$r.txt" rf="$out/conns-netns-r$r.txt"
	# shellcheck disable=SC2086
	ip netns exec "${ns}c" mpirun $asroot --oversubscribe --bind-to none -n 4 \
		--mca btl tcp,self --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include mga,mgb \
		-x PMIX_MCA_ptl_tcp_remote_connections -x PMIX_MCA_ptl_tcp_if_include \
		sh -c "$wrap" wrap "$out/collmpi" -sizes "$COLL_SIZES" -iters "$COLL_ITERS" ${COLL_FLAGS:-} -check >"$mf"
	base="${base:+$base,}$mf"
	# shellcheck disable=SC2086
	"$out/rdmarun" -n 4 -root 127.199.46.1:$((29600 + r)) -hosts 127.199.46.1,127.199.46.2 -- \
		sh -c "$wrap" wrap "$out/rdmacoll" -sizes "$COLL_SIZES" -iters "$COLL_ITERS" ${COLL_FLAGS:-} -check | sed 's/^\[0\] //' >"$rf"
	this="${this:+$this,}$rf"
done
echo "# 2 network-namespace hosts x 2 ranks: collectives (${RDMA_COLL_ALGO:-auto}) beside Open MPI's TCP BTL between the same hosts, $COLL_ROUNDS rounds"
"$out/rdmacoll" -compare "$base" "$this" | tee "$out/ratio-netns.txt"
