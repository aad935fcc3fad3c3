#!/usr/bin/env bash
# softroce-test.sh: build the tests that need a real kernel RDMA stack and run
# them, with the rdmacore provider, inside the Soft-RoCE VM of
# scripts/softroce (a throw-away QEMU guest with the rdma_rxe driver).
#
#   scripts/softroce-test.sh            what `make test-softroce` runs
#
# What runs: verbs/rdmacore's tests, which hold the verbs conformance suite
# (verbstest) and rdma.Conn's suite (internal/conntest: the one the root
# package runs on soft) over the rdmacore provider; the VM tests of other
# packages listed in VM_TESTS below (collectives' Join and AllReduce over
# rdmacore, the mixed fleets).
#
# Environment: GO (go), SOFTROCE_RUN (path of run-in-vm.sh), SOFTROCE_RACE
# ("-race", or "" to build without the race detector),
# SOFTROCE_VM_TESTS (replaces the VM_TESTS list),
# TESTFLAGS (extra flags for every test binary, e.g. "-test.v -test.run Conformance").
. "$(dirname "$0")/softroce-run.sh"
softroce_out softroce
# The binaries need nothing of rdma-core to build: they open the guest's
# libibverbs/librdmacm (Debian 12's) at run time.
echo "test-softroce: building test binaries ($RACE)"
# shellcheck disable=SC2086
$GO test $RACE -c -o "$OUT/rdmacore.test" ./verbs/rdmacore
# Other packages' tests made for the VM (they skip without SOFTROCE_DEV):
# package:test-regexp pairs; add yours here.
VM_TESTS=${SOFTROCE_VM_TESTS:-./collectives:RDMACore .:MixedFleetRDMACore|BusyPollRDMACore|RemoteRDMACore|StatsRDMACore ./capi:MixedPeersRDMACore|OneSidedRDMACore ./verbs/soft:DmaBuf|Conformance$/DmaBufMR}
: >"$OUT/packages"
for entry in $VM_TESTS; do
	pkg=${entry%%:*}
	name=$(echo "${pkg#./}" | tr / -)
	# shellcheck disable=SC2086
	$GO test $RACE -c -o "$OUT/pkg-$name.test" "$pkg"
	echo "$name ${entry#*:}" >>"$OUT/packages"
done

# The examples that run on a device as they run on soft in `make test`.
$GO build -o "$OUT/verbs-tcp-exchange" ./examples/verbs-tcp-exchange
$GO build -o "$OUT/filexfer" ./examples/filexfer

cat >"$OUT/run.sh" <<'GUEST'
#!/bin/sh
# Runs in the guest, in the directory holding the test binaries.
status=0
echo "== verbs/rdmacore on $SOFTROCE_DEV ($SOFTROCE_IP): provider tests, the verbs conformance suite and rdma.Conn's suite"
./rdmacore.test -test.count=1 -test.timeout=10m $TESTFLAGS || status=1
echo "== rdma.Conn's suite from and into Buffers, rendezvous through memory windows (RDMA_MEMORY_WINDOWS=1)"
RDMA_MEMORY_WINDOWS=1 ./rdmacore.test -test.count=1 -test.timeout=10m -test.run 'TestConnSuiteBuffers' $TESTFLAGS || status=1
while read -r name run; do
	echo "== $name: tests $run"
	./pkg-$name.test -test.count=1 -test.timeout=10m -test.run "$run" $TESTFLAGS </dev/null || status=1
done <packages
# serve LOG CMD...: start a server, as $server, and set addr to the address
# it prints as "listening on ADDR" (empty if none within 10 s).
serve() {
	out=$1
	shift
	"$@" >"$out" 2>&1 &
	server=$!
	addr=
	for _ in $(seq 1 100); do
		addr=$(sed -n 's/^listening on //p' "$out")
		[ -n "$addr" ] && break
		sleep 0.1
	done
}
# failed NAME: report a failed client and server pair with both logs.
failed() {
	echo "FAIL $1"
	sed 's/^/    server: /' "$log/server"
	sed 's/^/    client: /' "$log/client"
	status=1
}
echo "== examples/verbs-tcp-exchange on rdmacore: QPs set up over a TCP socket, WRITE and READ back"
log=$(mktemp -d)
serve "$log/server" ./verbs-tcp-exchange -provider rdmacore -server -addr "$SOFTROCE_IP:0"
if ./verbs-tcp-exchange -provider rdmacore -addr "$addr" >"$log/client" 2>&1 && wait $server &&
	grep -q 'RDMA WRITTEN and READ back, match' "$log/client" && grep -q 'checked' "$log/server"; then
	echo "ok   $(grep 'match' "$log/client")"
else
	failed verbs-tcp-exchange
fi
# filexfer NAME CLIENTARGS WANT: a file over one-sided RDMA on an rdma.Conn,
# both sides on rdmacore.
filexfer() {
	echo "== examples/filexfer $2 on rdmacore: $1"
	log=$(mktemp -d)
	serve "$log/server" env RDMA_PROVIDER=rdmacore ./filexfer -recv -addr "$SOFTROCE_IP:0"
	# shellcheck disable=SC2086 # words
	if RDMA_PROVIDER=rdmacore ./filexfer $2 -addr "$addr" >"$log/client" 2>&1 && wait $server &&
		grep -q "$3.* on rdmacore; the receiver's SHA-256 matches" "$log/client" && grep -q 'checked' "$log/server"; then
		echo "ok   $(cat "$log/client")"
		echo "     $(grep checked "$log/server")"
	else
		failed "filexfer $2"
	fi
}
filexfer "the sender writes into the receiver's Buffer, then notifies" "-size 16777217" "pushed with WriteRemoteNotify"
filexfer "the receiver reads the sender's Buffer" "-size 16777217 -pull" "pulled by the receiver's ReadRemote"
exit $status
GUEST
chmod +x "$OUT/run.sh"

echo "test-softroce: running in the Soft-RoCE VM"
SOFTROCE_PASSENV="${SOFTROCE_PASSENV:-GOTRACEBACK GODEBUG GOMAXPROCS GOGC} TESTFLAGS" TESTFLAGS="${TESTFLAGS:-}" \
	"$RUN" "$OUT" ./run.sh
