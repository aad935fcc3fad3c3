#!/bin/sh
# bench-mpi.sh: rdmacoll beside Open MPI on the same ranks and host.
#
#   cmd/rdmacoll/mpi/bench-mpi.sh OUTDIR
#
# Installs Open MPI from Debian's packages (openmpi-bin, libopenmpi-dev) if
# mpicc or mpirun is missing, builds collmpi.c with mpicc and rdmacoll with
# go, then for each rank count in COLL_RANKS runs COLL_ROUNDS rounds, each
# round Open MPI's program then rdmacoll under the same mpirun, and prints the
# ratio of their medians (rdmacoll -compare). Every output goes to OUTDIR.
# Environment: GO, COLL_RANKS (default "2 4"), COLL_ROUNDS (3), COLL_SIZES
# (4K,256K,4M,16M), COLL_ITERS (20), COLL_FLAGS (more rdmacoll flags, e.g.
# -tcp), MPIRUN_FLAGS (default --bind-to none: the Go ranks use more than
# one thread, and a shared machine's other load moves).
#
# Then the engine a group spanning hosts uses (its conns: RDMA_COLL_ALGO=stream,
# soft over TCP: RDMA_SOFT_SHM=0) beside Open MPI's TCP BTL (--mca btl
# tcp,self), both over loopback on this host, for COLL_TCP_RANKS ranks
# (default 4; empty skips it) at COLL_TCP_SIZES (4M,16M). Last, as root,
# 2 network-namespace hosts x 2 ranks beside Open MPI between the same
# hosts (bench-netns.sh, at COLL_TCP_SIZES; COLL_NETNS=0 skips it).
#
# COLL_ROOT_IP (default 127.0.0.1) is the loopback address the ranks meet on.
#
# COLL_OTHER names another rdmacoll binary (e.g. built from an earlier
# commit): each round then runs it right after this one, under the same
# mpirun, and its ratio to Open MPI is printed too (interleaved A/B on a
# shared host).
set -eu
out=${1:?usage: bench-mpi.sh OUTDIR}
GO=${GO:-go}
COLL_RANKS=${COLL_RANKS:-2 4}
COLL_ROUNDS=${COLL_ROUNDS:-3}
COLL_SIZES=${COLL_SIZES:-4K,256K,4M,16M}
COLL_ITERS=${COLL_ITERS:-20}
COLL_FLAGS=${COLL_FLAGS:-}
MPIRUN_FLAGS=${MPIRUN_FLAGS:---bind-to none}
COLL_TCP_RANKS=${COLL_TCP_RANKS-4}
COLL_TCP_SIZES=${COLL_TCP_SIZES:-4M,16M}
COLL_OTHER=${COLL_OTHER:-}
COLL_ROOT_IP=${COLL_ROOT_IP:-127.0.0.1}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"

if ! command -v mpicc >/dev/null 2>&1 || ! command -v mpirun >/dev/null 2>&1; then
	if ! command -v apt-get >/dev/null 2>&1; then
		echo "bench-mpi: no mpicc/mpirun and no apt-get: install Open MPI by hand" >&2
		exit 1
	fi
	if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
	echo "bench-mpi: installing Open MPI (openmpi-bin libopenmpi-dev)"
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends openmpi-bin libopenmpi-dev >/dev/null
fi

mpicc -O2 -Wall -o "$out/collmpi" "$here/collmpi.c"
$GO build -o "$out/rdmacoll" "$here/.."
$GO build -o "$out/rdmarun" "$here/../../rdmarun"
asroot=
if [ "$(id -u)" = 0 ]; then asroot=--allow-run-as-root; fi
echo "# $(mpirun --version 2>/dev/null | head -n 1); $($GO version); $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)"
for n in $COLL_RANKS; do
	base= this= other=
	for r in $(seq 1 "$COLL_ROUNDS"); do
		port=$((20000 + ($$ * 7 + r * 131 + n) % 30000))
		mf="$out/mpi-n$n-r$r.txt" rf="$out/rdmacoll-n$n-r$r.txt" of="$out/other-n$n-r$r.txt"
		# shellcheck disable=SC2086
		mpirun $asroot --oversubscribe $MPIRUN_FLAGS -n "$n" "$out/collmpi" \
			-sizes "$COLL_SIZES" -iters "$COLL_ITERS" -check >"$mf"
		# shellcheck disable=SC2086
		mpirun $asroot --oversubscribe $MPIRUN_FLAGS -n "$n" -x RDMA_ROOT_ADDR=$COLL_ROOT_IP:$port \
			"$out/rdmacoll" -sizes "$COLL_SIZES" -iters "$COLL_ITERS" -check $COLL_FLAGS >"$rf"
		if [ -n "$COLL_OTHER" ]; then
			# shellcheck disable=SC2086
			mpirun $asroot --oversubscribe $MPIRUN_FLAGS -n "$n" -x RDMA_ROOT_ADDR=$COLL_ROOT_IP:$((port + 1)) \
				"$COLL_OTHER" -sizes "$COLL_SIZES" -iters "$COLL_ITERS" -check $COLL_FLAGS >"$of"
			other="${other:+$other,}$of"
		fi
		base="${base:+$base,}$mf" this="${this:+$this,}$rf"
	done
	echo "# $n ranks, $COLL_ROUNDS rounds (Open MPI then rdmacoll in each)"
	"$out/rdmacoll" -compare "$base" "$this" | tee "$out/ratio-n$n.txt"
	if [ -n "$COLL_OTHER" ]; then
		echo "# $n ranks, $COLL_OTHER in the same rounds"
		"$out/rdmacoll" -compare "$base" "$other" | tee "$out/ratio-other-n$n.txt"
	fi
done
for n in $COLL_TCP_RANKS; do
	base= this=
	for r in $(seq 1 "$COLL_ROUNDS"); do
		port=$((20000 + ($$ * 11 + r * 137 + n) % 30000))
		mf="$out/mpitcp-n$n-r$r.txt" rf="$out/conns-n$n-r$r.txt"
		# shellcheck disable=SC2086
		mpirun $asroot --oversubscribe $MPIRUN_FLAGS --mca btl tcp,self -n "$n" "$out/collmpi" \
			-sizes "$COLL_TCP_SIZES" -iters "$COLL_ITERS" -check >"$mf"
		# shellcheck disable=SC2086
		mpirun $asroot --oversubscribe $MPIRUN_FLAGS -n "$n" -x RDMA_ROOT_ADDR=$COLL_ROOT_IP:$port \
			-x RDMA_COLL_ALGO=stream -x RDMA_SOFT_SHM=0 \
			"$out/rdmacoll" -sizes "$COLL_TCP_SIZES" -iters "$COLL_ITERS" -check $COLL_FLAGS >"$rf"
		base="${base:+$base,}$mf" this="${this:+$this,}$rf"
	done
	echo "# $n ranks over conns (soft over TCP) beside Open MPI's TCP BTL, $COLL_ROUNDS rounds"
	"$out/rdmacoll" -compare "$base" "$this" | tee "$out/ratio-tcp-n$n.txt"
done
# Last, 2 network-namespace hosts x 2 ranks (root and iproute2 needed).
if [ "${COLL_NETNS:-1}" = 0 ]; then
	echo "# bench-netns.sh skipped: COLL_NETNS=0"
elif [ "$(id -u)" = 0 ] && command -v ip >/dev/null 2>&1; then
	COLL_SIZES=$COLL_TCP_SIZES "$here/bench-netns.sh" "$out"
else
	echo "# bench-netns.sh skipped: it needs root and iproute2"
fi
