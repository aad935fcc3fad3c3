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
set -eu
out=${1:?usage: bench-mpi.sh OUTDIR}
GO=${GO:-go}
COLL_RANKS=${COLL_RANKS:-2 4}
COLL_ROUNDS=${COLL_ROUNDS:-3}
COLL_SIZES=${COLL_SIZES:-4K,256K,4M,16M}
COLL_ITERS=${COLL_ITERS:-20}
COLL_FLAGS=${COLL_FLAGS:-}
MPIRUN_FLAGS=${MPIRUN_FLAGS:---bind-to none}
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
asroot=
if [ "$(id -u)" = 0 ]; then asroot=--allow-run-as-root; fi
echo "# $(mpirun --version 2>/dev/null | head -n 1); $($GO version); $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)"
for n in $COLL_RANKS; do
	base= this=
	for r in $(seq 1 "$COLL_ROUNDS"); do
		port=$((20000 + ($$ * 7 + r * 131 + n) % 30000))
		mf="$out/mpi-n$n-r$r.txt" rf="$out/rdmacoll-n$n-r$r.txt"
		# shellcheck disable=SC2086
		mpirun $asroot --oversubscribe $MPIRUN_FLAGS -n "$n" "$out/collmpi" \
			-sizes "$COLL_SIZES" -iters "$COLL_ITERS" -check >"$mf"
		# shellcheck disable=SC2086
		mpirun $asroot --oversubscribe $MPIRUN_FLAGS -n "$n" -x RDMA_ROOT_ADDR=127.0.0.1:$port \
			"$out/rdmacoll" -sizes "$COLL_SIZES" -iters "$COLL_ITERS" -check $COLL_FLAGS >"$rf"
		base="${base:+$base,}$mf" this="${this:+$this,}$rf"
	done
	echo "# $n ranks, $COLL_ROUNDS rounds (Open MPI then rdmacoll in each)"
	"$out/rdmacoll" -compare "$base" "$this" | tee "$out/ratio-n$n.txt"
done
