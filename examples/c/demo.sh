#!/usr/bin/env bash
# make demo: the original rdma_lib's server and two clients, all-to-all over rdma on
# loopback. The server is 127.0.0.1:5555; the clients connect from 127.0.0.2
# and 127.0.0.3 (loopback addresses standing in for three hosts). Each
# program prints, every round, the combined messages of all three; this
# script checks that all 100 rounds did, and exits non-zero (never hangs) if
# any process fails or takes too long.
set -uo pipefail

bin=${1:?usage: demo.sh BIN_DIR}
limit=${DEMO_TIMEOUT:-60}   # seconds each process may take
rounds=100
logs=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	rm -rf "$logs"
}
trap cleanup EXIT

# Line-buffered output, so the script sees each step as it happens.
run() { # name, program args...
	local name=$1; shift
	timeout "$limit" stdbuf -oL "$@" >"$logs/$name" 2>&1 &
	pids+=($!)
}

# wait_for NAME PID TEXT: wait until NAME's output contains TEXT; fail at
# once if NAME exits first.
wait_for() {
	for _ in $(seq 1 $((limit * 10))); do
		grep -q "$3" "$logs/$1" && return 0
		if ! kill -0 "$2" 2>/dev/null; then
			grep -q "$3" "$logs/$1" && return 0
			echo "demo: $1 exited before printing '$3':" >&2
			cat "$logs/$1" >&2
			return 1
		fi
		sleep 0.1
	done
	echo "demo: timed out waiting for $1 to print '$3'" >&2
	cat "$logs/$1" >&2
	return 1
}

# The programs print recv_buf with %s, which stops at the end of the server's
# NUL-padded block; the library's verbose mode prints all blocks, as the
# original library did.
export RDMA_LIB_VERBOSE=1

echo "demo: provider ${RDMA_PROVIDER:-auto (rdmacore with an active RDMA device, else soft)}; server 127.0.0.1:5555, clients 127.0.0.2 and 127.0.0.3"
run server "$bin/server"
wait_for server "${pids[0]}" "Waiting for client 1" || exit 1
# One client at a time, so that client 1 is participant 1.
run client1 "$bin/client" 1 127.0.0.2
wait_for server "${pids[0]}" "Client 1 connected" || exit 1
run client2 "$bin/client" 2 127.0.0.3

status=0
names=(server client1 client2)
for i in 0 1 2; do
	if ! wait "${pids[$i]}"; then
		echo "demo: ${names[$i]} failed (exit status $?; 124 is a timeout)" >&2
		status=1
	fi
done
pids=()

for name in "${names[@]}"; do
	echo "==> $name (first and last rounds)"
	sed -n '1,12p' "$logs/$name"
	echo "    ..."
	tail -n 4 "$logs/$name"
	echo
done

# Every round, every participant must print all three messages in order.
for name in "${names[@]}"; do
	good=0
	for r in $(seq 1 $rounds); do
		grep -qF "Combined message: 'Server Round $r; Client 1 Round $r; Client 2 Round $r;'" "$logs/$name" && good=$((good + 1))
	done
	echo "demo: $name printed the combined messages of all three in $good of $rounds rounds"
	[ "$good" = "$rounds" ] || status=1
done
if [ "$status" = 0 ]; then echo "demo: OK"; else echo "demo: FAILED" >&2; fi
exit $status
