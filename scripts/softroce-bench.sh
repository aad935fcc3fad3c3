#!/usr/bin/env bash
# softroce-bench.sh: in one Soft-RoCE guest run, measure rdma.Conn over the
# rdmacore provider beside rdma-core's rstream (rsockets) and perftest's
# ib_send_bw / ib_send_lat, and the kernel's TCP, for the same sizes, and print
# the ratios. The guest is emulated (TCG): only ratios from one run mean
# anything, never the absolute figures.
#
#   scripts/softroce-bench.sh            (SIZES="64 4096 65536" COUNT=500 by default)
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
. scripts/softroce-run.sh
SIZES=${SIZES:-64 4096 65536}
COUNT=${COUNT:-500}
# rdma.Conn runs with its default PollTime, and again with POLL_ALT (default
# -1ns: no busy-poll at all, events only); POLL_SWEEP adds 64-byte ping-pongs
# at other PollTimes (e.g. "5us 10us 50us"), to choose the default by.
POLL_ALT=${POLL_ALT:--1ns}
POLL_SWEEP=${POLL_SWEEP:-}
OUT=build/softroce-bench
rm -rf "$OUT"
mkdir -p "$OUT"
$GO build -o "$OUT/softroce-bench" ./scripts/softroce-bench
$GO test -c -o "$OUT/rdmacore.test" ./verbs/rdmacore

cat >"$OUT/run.sh" <<GUEST
#!/bin/sh
# Each line: <tool> <test> <size> <MB/s> <us per transfer>
ip=\$SOFTROCE_IP
for s in $SIZES; do
	# rstream: ping-pong of s bytes, COUNT times; its Gb/sec counts both
	# directions and its usec/xfer is half a round trip
	rstream -b "\$ip" -S \$s -C $COUNT >/dev/null 2>&1 & p=\$!
	sleep 1
	rstream -s "\$ip" -S \$s -C $COUNT | awk -v s=\$s '\$1=="custom" {printf "rstream pingpong %d %.3f %.2f\n", s, \$7*1000/8, 2*\$8}'
	wait \$p
	for n in rdma tcp; do
		./softroce-bench -net \$n -test pingpong -size \$s -count $COUNT |
			awk '{printf "%s pingpong %d %.3f %.2f\n", \$1, \$3, \$6, \$8}'
	done
	# rsockets busy-polls 10 us before it sleeps; rdma.Conn too, by default (Config.PollTime)
	./softroce-bench -net rdma -polltime $POLL_ALT -test pingpong -size \$s -count $COUNT |
		awk '{printf "rdma-poll pingpong %d %.3f %.2f\n", \$3, \$6, \$8}'
	# ib_send_bw: a stream of COUNT sends of s bytes
	ib_send_bw -d \$SOFTROCE_DEV -F -n $COUNT -s \$s >/dev/null 2>&1 & p=\$!
	sleep 1
	ib_send_bw -d \$SOFTROCE_DEV -F -n $COUNT -s \$s "\$ip" |
		awk -v s=\$s '\$1==s && NF>=5 {printf "ib_send_bw stream %d %.3f 0\n", s, \$4}'
	wait \$p
	for n in rdma tcp; do
		./softroce-bench -net \$n -test stream -size \$s -count $COUNT |
			awk '{printf "%s stream %d %.3f %.2f\n", \$1, \$3, \$6, \$8}'
	done
done
for pt in $POLL_SWEEP; do
	./softroce-bench -net rdma -polltime \$pt -test pingpong -size 64 -count $COUNT |
		awk -v pt=\$pt '{printf "rdma-poll%s pingpong %d %.3f %.2f\n", pt, \$3, \$6, \$8}'
done
# The provider alone: 64-byte inline SEND ping-pong on raw verbs, waiting on
# completion channels (what rdma.Conn's layering costs is the difference)
./rdmacore.test -test.run '^\$' -test.bench 'PingPongEvents\$' -test.benchtime ${COUNT}x |
	awk '/^BenchmarkPingPongEvents/ {printf "verbs pingpong 64 0 %.2f\n", \$3/1000}'
# ib_send_lat: 64-byte ping-pong; t_avg is half a round trip
ib_send_lat -d \$SOFTROCE_DEV -F -n $COUNT -s 64 >/dev/null 2>&1 & p=\$!
sleep 1
ib_send_lat -d \$SOFTROCE_DEV -F -n $COUNT -s 64 "\$ip" |
	awk '\$1==64 && NF>=6 {printf "ib_send_lat pingpong 64 0 %.2f\n", 2*\$6}'
wait \$p
GUEST
chmod +x "$OUT/run.sh"
"$RUN" "$OUT" ./run.sh | tee "$OUT/results.txt"

echo
echo "rdma.Conn (rdmacore) vs the references, same guest run; >1 means rdma.Conn is faster"
awk -v alt="$POLL_ALT" '
	{ mbs[$1" "$2" "$3] = $4; us[$1" "$2" "$3] = $5; sizes[$3] = 1 }
	END {
		for (s in sizes) {
			k = "rdma pingpong " s
			if (("rstream pingpong " s) in mbs && mbs["rstream pingpong " s] > 0)
				printf "pingpong %6d B: rdma.Conn/rstream throughput %.2fx (with PollTime %s %.2fx)   rdma.Conn/TCP %.2fx\n", s,
					mbs[k] / mbs["rstream pingpong " s], alt, mbs["rdma-poll pingpong " s] / mbs["rstream pingpong " s],
					mbs[k] / mbs["tcp pingpong " s]
			k = "rdma stream " s
			if (("ib_send_bw stream " s) in mbs && mbs["ib_send_bw stream " s] > 0)
				printf "stream   %6d B: rdma.Conn/ib_send_bw throughput %.2fx   rdma.Conn/TCP %.2fx\n", s,
					mbs[k] / mbs["ib_send_bw stream " s], mbs[k] / mbs["tcp stream " s]
		}
		if (("ib_send_lat pingpong 64") in us)
			printf "64 B round trip (us): ib_send_lat %.1f, rstream %.1f, rdmacore raw verbs %.1f, rdma.Conn %.1f (PollTime %s: %.1f), TCP %.1f; rstream/rdma.Conn %.2fx, verbs/rdma.Conn %.2fx, ib_send_lat/rdma.Conn %.2fx (>1: rdma.Conn faster)\n",
				us["ib_send_lat pingpong 64"], us["rstream pingpong 64"], us["verbs pingpong 64"], us["rdma pingpong 64"], alt,
				us["rdma-poll pingpong 64"], us["tcp pingpong 64"], us["rstream pingpong 64"] / us["rdma pingpong 64"], us["verbs pingpong 64"] / us["rdma pingpong 64"], us["ib_send_lat pingpong 64"] / us["rdma pingpong 64"]
	}' "$OUT/results.txt" | sort
