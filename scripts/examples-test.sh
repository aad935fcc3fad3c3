#!/usr/bin/env bash
# examples-test.sh: build every Go example under examples/ and run each on
# loopback for a bounded time, checking that it exits 0 and prints what it is
# meant to (what `make test-examples` runs; the C programs run in `make demo`).
# An example without an entry below fails the run: add one when you add an
# example.
#
# Environment: GO (go), EXAMPLE_TIMEOUT (seconds per run, default 120).
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
LIMIT=${EXAMPLE_TIMEOUT:-120}
OUT=build/examples
NL=$'\n'

# Per example: its arguments and the regexps its output must match (one a
# line). An example declared by pair runs twice, as a server and a client:
# the server prints "listening on ADDR" and the client gets -addr ADDR; the
# client's output is checked and the server must exit 0 too.
declare -A ARGS=() PAIR=() WANT=()
one() { ARGS[$1]=$2 WANT[$1]=$3; }          # one NAME ARGS WANT
pair() { PAIR[$1]="$2|$3" WANT[$1]=$4; }    # pair NAME SERVERARGS CLIENTARGS WANT
one allreduce "-n 3 -count 262144 -iters 2" 'allreduce: 3 ranks, .*result checked'
one echo "-clients 2 -n 300" 'echo: 2 clients x 300 messages echoed'
one grpc "-n 50" 'grpc over rdma: 50 health checks .*: SERVING'
one http "-n 50" 'http over rdma: 50 requests .*last answer: "hello req49 over rdma'
one tls "" 'tls over rdma .*TLS 1\.3.*"server got: hello over TLS over rdma'
one yamux "-streams 4 -size 262144" 'yamux over rdma .*: 4 streams x 262144 bytes each way'
pair rsocket "echo-server -addr 127.0.0.1:0" "echo-client -bytes 1000000" \
	'echo client: 1000000 bytes echoed and checked, EOF after CloseWrite'
pair verbs-tcp-exchange "-server -addr 127.0.0.1:0 -size 4194304" "-size 4194304" \
	'verbs-tcp-exchange: 4194304 bytes RDMA WRITTEN and READ back, match'
pair filexfer "-recv -addr 127.0.0.1:0" "-size 33554433" \
	"filexfer: 33554433 bytes pushed with WriteRemoteNotify .*SHA-256 matches${NL}filexfer: received 33554433 bytes written into our Buffer by the sender .*checked"

rm -rf "$OUT"
mkdir -p "$OUT"
status=0
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# check NAME LOG RC WANT: report one run. WANT is regexps, one a line, each
# of which some line of the output must match.
check() {
	local name=$1 log=$2 rc=$3 want=$4 re missing=
	while IFS= read -r re; do
		grep -Eq -- "$re" "$log" || missing=$re
	done <<<"$want"
	if [ "$rc" -ne 0 ]; then
		echo "FAIL example $name: exit status $rc (124: did not finish in ${LIMIT}s)"
		sed 's/^/    /' "$log"
		status=1
	elif [ -n "$missing" ]; then
		echo "FAIL example $name: output does not match /$missing/"
		sed 's/^/    /' "$log"
		status=1
	else
		echo "ok   example $name: $(grep -E -- "${want%%"$NL"*}" "$log" | head -n 1 | sed 's/^[0-9/]* [0-9:]* //')"
	fi
}

# run_pair NAME SERVERARGS CLIENTARGS LOG: run example NAME as a server and
# a client of it (see PAIR); both outputs, client's first, go to LOG; the
# status is the client's, else the server's.
run_pair() {
	local name=$1 sargs=$2 cargs=$3 log=$4 rc=0 srv=0 addr= server
	# shellcheck disable=SC2086 # words
	timeout "$LIMIT" "$OUT/$name" $sargs >"$log.server" 2>&1 </dev/null &
	server=$!
	for _ in $(seq 1 $((LIMIT * 10))); do
		addr=$(sed -n 's/^listening on \([^ ]*\)$/\1/p' "$log.server")
		[ -n "$addr" ] || ! kill -0 $server 2>/dev/null || { sleep 0.1; continue; }
		break
	done
	if [ -n "$addr" ]; then
		# shellcheck disable=SC2086
		timeout "$LIMIT" "$OUT/$name" $cargs -addr "$addr" >"$log" 2>&1 </dev/null || rc=$?
	else
		echo "no 'listening on' line from the server" >"$log"
		rc=1
	fi
	wait $server || srv=$?
	if [ $rc -eq 0 ] && [ $srv -ne 0 ]; then
		echo "server exit status $srv:" >>"$log"
		rc=$srv
	fi
	cat "$log.server" >>"$log"
	return $rc
}

for dir in $($GO list -f '{{if eq .Name "main"}}{{.Dir}}{{end}}' ./examples/...); do
	name=$(basename "$dir")
	if [ -z "${WANT[$name]+set}" ]; then
		echo "FAIL example $name: no expected output in scripts/examples-test.sh"
		status=1
		continue
	fi
	$GO build -o "$OUT/$name" "./examples/$name"
	rc=0
	if [ -n "${PAIR[$name]+set}" ]; then
		run_pair "$name" "${PAIR[$name]%%|*}" "${PAIR[$name]#*|}" "$logs/$name" || rc=$?
	else
		# shellcheck disable=SC2086 # ARGS holds words
		timeout "$LIMIT" "$OUT/$name" ${ARGS[$name]} >"$logs/$name" 2>&1 </dev/null || rc=$?
	fi
	check "$name" "$logs/$name" "$rc" "${WANT[$name]}"
done

# filexfer's pull variant: the receiver RDMA-reads the sender's copy.
rc=0
run_pair filexfer "-recv -addr 127.0.0.1:0" "-size 33554433 -pull" "$logs/filexfer-pull" || rc=$?
check "filexfer -pull" "$logs/filexfer-pull" "$rc" \
	"filexfer: 33554433 bytes pulled by the receiver's ReadRemote .*SHA-256 matches${NL}filexfer: received 33554433 bytes read from the sender's Buffer .*checked"

# One rank per process under the repository's launcher.
$GO build -o "$OUT/rdmarun" ./cmd/rdmarun
rc=0
timeout "$LIMIT" "$OUT/rdmarun" -n 3 -- "$OUT/allreduce" -count 65536 -iters 2 >"$logs/rdmarun" 2>&1 </dev/null || rc=$?
check "allreduce under rdmarun" "$logs/rdmarun" "$rc" '^\[0\] allreduce: 3 ranks, .*result checked'

exit $status
