#!/usr/bin/env bash
# softroce-bench.sh: in one Soft-RoCE guest run, measure rdma.Conn over the
# rdmacore provider beside rdma-core's rstream (rsockets) and perftest's
# ib_send_bw / ib_send_lat, and the kernel's TCP, for the same sizes, and print
# the ratios. The guest is emulated (TCG): only ratios from one run mean
# anything, never the absolute figures.
#
#   scripts/softroce-bench.sh            (SIZES="64 4096 65536" COUNT=500 LATENCY_COUNT=20000 ROUNDS=3 by default)
#
# Ping-pongs are compared like for like, and are true ping-pongs: rstream
# runs "-S size -C 1 -I N" (N round trips of one transfer each way; "-C N"
# would be a burst of N one way and N back). rstream's default loop is
# nonblocking: both ends poll without ever sleeping (rpoll with a zero
# timeout), so it stands beside rdma.Conn with Config.BusyPoll
# ("rdma-busy"); with -T b rstream blocks after rsockets' 10 us of polling
# ("rstream-blocking"), which stands beside rdma.Conn's default (adaptive
# PollTime, then sleep); with -T s it runs over the kernel's TCP sockets
# ("rstream-tcp": C over kernel TCP), and "tcp" is Go's own TCP, the two
# baselines a user weighs rdma.Conn against. Both ends run in two
# processes, as rstream's do;
# "rdma-1p" and "tcp-1p" are the same with both ends in one process.
# Each ping-pong runs ROUNDS times, interleaved; the median is reported.
# The 64-byte ping-pongs (and the raw verbs and ib_send_lat ones) run
# LATENCY_COUNT round trips: in the emulated guest a process's first round
# trips take milliseconds (code translated on first run, runtime threads
# started) and a few scheduling stalls weigh on a mean, so a short run
# measures mostly those. softroce-bench also reports the median round trip,
# printed beside ib_send_lat's typical one.
. "$(dirname "$0")/softroce-run.sh"
SIZES=${SIZES:-64 4096 65536}
COUNT=${COUNT:-500}
LATENCY_COUNT=${LATENCY_COUNT:-20000}
ROUNDS=${ROUNDS:-3}
# POLL_SWEEP adds 64-byte ping-pongs at other PollTimes (e.g. "10us 50us
# 200us"), to choose the default by. BASE_REV (a git revision) adds the
# ping-pongs of rdma.Conn as built from that revision ("base-1p": one
# process, its defaults; "base-2p": two processes, its defaults;
# "base-busy": two processes, BusyPoll), for a before-and-after in the same
# guest run.
POLL_SWEEP=${POLL_SWEEP:-}
BASE_REV=${BASE_REV:-}
softroce_out softroce-bench
$GO build -o "$OUT/softroce-bench" ./cmd/softroce-bench
if [ -n "$BASE_REV" ]; then
	base=$(mktemp -d)
	git worktree add -q --detach "$base" "$BASE_REV"
	(cd "$base" && $GO build -o "$OLDPWD/$OUT/softroce-bench-base" ./cmd/softroce-bench)
	git worktree remove --force "$base"
fi
$GO test -c -o "$OUT/rdmacore.test" ./verbs/rdmacore

cat >"$OUT/run.sh" <<GUEST
#!/bin/sh
# Each line: <tool> <test> <size> <MB/s> <us per transfer> [<median round trip, us>]
ip=\$SOFTROCE_IP
count() { if [ "\$1" = 64 ]; then echo $LATENCY_COUNT; else echo $COUNT; fi; }
rstream_pp() { # name size rstream-flags...
	name=\$1 s=\$2; shift 2
	rstream -b "\$ip" -S \$s -C 1 -I \$(count \$s) "\$@" >/dev/null 2>&1 & p=\$!
	sleep 1
	# its Gb/sec counts both directions; its usec/xfer is half a round trip
	rstream -s "\$ip" -S \$s -C 1 -I \$(count \$s) "\$@" | awk -v n=\$name -v s=\$s '\$1=="custom" {printf "%s pingpong %d %.3f %.2f\n", n, s, \$7*1000/8, 2*\$8}'
	wait \$p
}
bench() { # name test size softroce-bench-flags...
	name=\$1 t=\$2 s=\$3; shift 3
	c=$COUNT
	[ "\$t" = pingpong ] && c=\$(count \$s)
	./softroce-bench -test \$t -size \$s -count \$c "\$@" |
		awk -v n=\$name '\$2=="pingpong" || \$2=="stream" {printf "%s %s %d %.3f %.2f %.2f\n", n, \$2, \$3, \$6, \$8, \$10}'
}
# the same as bench's ping-pong, with every wait parked on Go's runtime
# poller (no direct waits: verbs/rdmacore/directwait_linux.go)
bench_poller() { # name size softroce-bench-flags...
	name=\$1 s=\$2; shift 2
	RDMA_DIRECT_WAITS=0 ./softroce-bench -test pingpong -size \$s -count \$(count \$s) "\$@" |
		awk -v n=\$name '\$2=="pingpong" || \$2=="stream" {printf "%s %s %d %.3f %.2f %.2f\n", n, \$2, \$3, \$6, \$8, \$10}'
}
for s in $SIZES; do
	for r in \$(seq $ROUNDS); do
		rstream_pp rstream \$s
		bench rdma-busy pingpong \$s -net rdma -busypoll -procs 2
		rstream_pp rstream-blocking \$s -T b
		rstream_pp rstream-tcp \$s -T s
		bench rdma pingpong \$s -net rdma -procs 2
		bench_poller rdma-poller \$s -net rdma -procs 2
		bench tcp pingpong \$s -net tcp -procs 2
		bench rdma-1p pingpong \$s -net rdma
		bench tcp-1p pingpong \$s -net tcp
		# Go's floor under rdma-busy: raw verbs, a goroutine per end
		# busy-polling (yielding as rdma.Conn does, and never), one process
		if [ \$s = 64 ]; then
			./rdmacore.test -test.run '^\$' -test.bench 'PingPongBusyPollTwoGoroutines' -test.benchtime ${LATENCY_COUNT}x |
				awk '/^BenchmarkPingPongBusyPollTwoGoroutines\/yield10us/ {printf "verbs-busy-2g pingpong 64 0 %.2f %.2f\n", \$3/1000, \$5/1000}
					/^BenchmarkPingPongBusyPollTwoGoroutines\/noyield/ {printf "verbs-busy-2g-noyield pingpong 64 0 %.2f %.2f\n", \$3/1000, \$5/1000}'
			# and in two processes, as rstream and rdma-busy run (the
			# answering process's own lines go to stderr)
			./rdmacore.test -test.run '^\$' -test.bench 'PingPongBusyPollTwoProcesses' -test.benchtime ${LATENCY_COUNT}x 2>/dev/null |
				awk '/^BenchmarkPingPongBusyPollTwoProcesses\/yield10us/ {printf "verbs-busy-2p pingpong 64 0 %.2f %.2f\n", \$3/1000, \$5/1000}
					/^BenchmarkPingPongBusyPollTwoProcesses\/noyield/ {printf "verbs-busy-2p-noyield pingpong 64 0 %.2f %.2f\n", \$3/1000, \$5/1000}'
		fi
		if [ -x ./softroce-bench-base ]; then
			./softroce-bench-base -test pingpong -size \$s -count \$(count \$s) -net rdma |
				awk '{printf "base-1p %s %d %.3f %.2f\n", \$2, \$3, \$6, \$8}'
			./softroce-bench-base -test pingpong -size \$s -count \$(count \$s) -net rdma -busypoll -procs 2 |
				awk '{printf "base-busy %s %d %.3f %.2f\n", \$2, \$3, \$6, \$8}'
			./softroce-bench-base -test pingpong -size \$s -count \$(count \$s) -net rdma -procs 2 |
				awk '{printf "base-2p %s %d %.3f %.2f\n", \$2, \$3, \$6, \$8}'
		fi
	done
	# ib_send_bw: a stream of COUNT sends of s bytes
	ib_send_bw -d \$SOFTROCE_DEV -F -n $COUNT -s \$s >/dev/null 2>&1 & p=\$!
	sleep 1
	ib_send_bw -d \$SOFTROCE_DEV -F -n $COUNT -s \$s "\$ip" |
		awk -v s=\$s '\$1==s && NF>=5 {printf "ib_send_bw stream %d %.3f 0\n", s, \$4}'
	wait \$p
	bench rdma stream \$s -net rdma
	bench tcp stream \$s -net tcp
done
for pt in $POLL_SWEEP; do
	bench rdma-poll\$pt pingpong 64 -net rdma -procs 2 -polltime \$pt
done
# The provider alone: 64-byte inline SEND ping-pong on raw verbs, one
# goroutine waiting on completion channels for both ends
# (and busy-polling both ends, as rdma-busy does)
./rdmacore.test -test.run '^\$' -test.bench 'PingPong(Events|EventsTwoGoroutines|BusyPoll)\$' -test.benchtime ${LATENCY_COUNT}x |
	awk '/^BenchmarkPingPongEvents-/ {printf "verbs pingpong 64 0 %.2f\n", \$3/1000}
		/^BenchmarkPingPongEventsTwoGoroutines/ {printf "verbs-2g pingpong 64 0 %.2f\n", \$3/1000}
		/^BenchmarkPingPongBusyPoll/ {printf "verbs-busy pingpong 64 0 %.2f\n", \$3/1000}'
# ib_send_lat: 64-byte ping-pong, busy-polling; t_typical and t_avg are
# half a round trip
ib_send_lat -d \$SOFTROCE_DEV -F -n $LATENCY_COUNT -s 64 >/dev/null 2>&1 & p=\$!
sleep 1
ib_send_lat -d \$SOFTROCE_DEV -F -n $LATENCY_COUNT -s 64 "\$ip" |
	awk '\$1==64 && NF>=6 {printf "ib_send_lat pingpong 64 0 %.2f %.2f\n", 2*\$6, 2*\$5}'
wait \$p
GUEST
chmod +x "$OUT/run.sh"
"$RUN" "$OUT" ./run.sh | tee "$OUT/results.txt"

echo
echo "rdma.Conn (rdmacore) vs the references, same guest run, medians of $ROUNDS rounds"
awk '
	function median(key,    n, i, j, t, a) {
		n = cnt[key]
		for (i = 1; i <= n; i++) a[i] = val[key, i]
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return n == 0 ? 0 : (n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2)
	}
	# the median over rounds of the ratio a/b within a round: the two ran
	# seconds apart, so a slow round of the emulated guest slows both
	function medratio(a, b,    n, i, j, t, r) {
		n = cnt[a] < cnt[b] ? cnt[a] : cnt[b]
		for (i = 1; i <= n; i++) r[i] = val[b, i] > 0 ? val[a, i] / val[b, i] : 0
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (r[j] < r[i]) { t = r[i]; r[i] = r[j]; r[j] = t }
		return n == 0 ? 0 : (n % 2 ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2)
	}
	# floor prints the busy-polling floor of Go, k (k and k-noyield, 64 B), against
	# rstream and rdma busy; how says how its ends run
	function floor(how, k,    y, n, r) {
		y = k " pingpong 64"; n = k "-noyield pingpong 64"; r = "rstream pingpong 64"
		printf "64 B round trip (us), Go with nothing else (raw verbs busy-polling, %s): yielding every 10 us %.1f (median %.1f), never %.1f (median %.1f); %.2fx and %.2fx rstream (by rounds %.2fx, %.2fx); rdma busy/this floor %.2fx (by rounds %.2fx)\n",
			how, median(y), p50median(y), median(n), p50median(n), median(y) / median(r), median(n) / median(r),
			medratio(y, r), medratio(n, r), median("rdma-busy pingpong 64") / median(y), medratio("rdma-busy pingpong 64", y)
	}
	function p50median(key,    n, i, j, t, a) {
		n = cnt[key]
		for (i = 1; i <= n; i++) a[i] = p50[key, i]
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return n == 0 ? 0 : (n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2)
	}
	{ k = $1 " " $2 " " $3; cnt[k]++; val[k, cnt[k]] = $5; p50[k, cnt[k]] = NF >= 6 ? $6 : 0; mb[k] = $4; sizes[$3] = 1 }
	END {
		for (s in sizes) {
			if (s == 0) continue
			rb = median("rdma-busy pingpong " s); rs = median("rstream pingpong " s)
			rd = median("rdma pingpong " s); rsb = median("rstream-blocking pingpong " s)
			t = median("tcp pingpong " s); r1 = median("rdma-1p pingpong " s); t1 = median("tcp-1p pingpong " s)
			ct = median("rstream-tcp pingpong " s)
			rp = median("rdma-poller pingpong " s)
			if (rp > 0)
				printf "pingpong %6d B round trip (us), rdma default: with direct waits %.1f, every wait on the poller %.1f (%.2fx; by rounds %.2fx)\n",
					s, rd, rp, rd / rp, medratio("rdma pingpong " s, "rdma-poller pingpong " s)
			if (ct > 0 && t > 0)
				printf "pingpong %6d B round trip (us), the baselines: C over kernel TCP (rstream -T s) %.1f, Go TCP %.1f; rdma default/C TCP %.2fx, rdma default/Go TCP %.2fx (by rounds %.2fx), rdma busy/Go TCP %.2fx\n",
					s, ct, t, rd / ct, rd / t, medratio("rdma pingpong " s, "tcp pingpong " s), rb / t
			if (rs > 0 && rsb > 0 && t > 0)
				printf "pingpong %6d B round trip (us): rdma busy %.1f vs rstream %.1f = %.2fx (median of the rounds\047 ratios %.2fx); rdma default %.1f vs rstream -T b %.1f = %.2fx (%.2fx); TCP %.1f (rdma default/TCP %.2fx); one process: rdma %.1f, TCP %.1f%s\n",
					s, rb, rs, rb / rs, medratio("rdma-busy pingpong " s, "rstream pingpong " s),
					rd, rsb, rd / rsb, medratio("rdma pingpong " s, "rstream-blocking pingpong " s), t, rd / t, r1, t1,
					cnt["base-1p pingpong " s] ? sprintf("; base revision: busy %.1f (%.2fx rstream, %.2fx by rounds), default %.1f (%.2fx rstream -T b, %.2fx by rounds), one process %.1f", median("base-busy pingpong " s), median("base-busy pingpong " s) / rs, medratio("base-busy pingpong " s, "rstream pingpong " s), median("base-2p pingpong " s), median("base-2p pingpong " s) / rsb, medratio("base-2p pingpong " s, "rstream-blocking pingpong " s), median("base-1p pingpong " s)) : ""
			k = "rdma stream " s
			if (("ib_send_bw stream " s) in mb && mb["ib_send_bw stream " s] > 0)
				printf "stream   %6d B: rdma.Conn/ib_send_bw throughput %.2fx   rdma.Conn/TCP %.2fx\n", s,
					mb[k] / mb["ib_send_bw stream " s], mb[k] / mb["tcp stream " s]
		}
		if (("ib_send_lat pingpong 64") in mb && cnt["rdma-busy pingpong 64"])
			printf "64 B median round trip (us): rdma busy %.1f, rdma default %.1f, TCP %.1f; ib_send_lat typical %.1f\n",
				p50median("rdma-busy pingpong 64"), p50median("rdma pingpong 64"), p50median("tcp pingpong 64"), p50median("ib_send_lat pingpong 64")
		if (("verbs-busy pingpong 64") in mb)
			printf "64 B round trip (us): raw verbs busy-polling %.1f, rdma busy/raw verbs busy-polling %.2fx\n",
				median("verbs-busy pingpong 64"), median("rdma-busy pingpong 64") / median("verbs-busy pingpong 64")
		if (("verbs-busy-2g pingpong 64") in mb && cnt["rstream pingpong 64"])
			floor("one process, a goroutine per end", "verbs-busy-2g")
		if (("verbs-busy-2p pingpong 64") in mb && cnt["rstream pingpong 64"])
			floor("two processes, as rstream and rdma busy run", "verbs-busy-2p")
		if (("verbs pingpong 64") in mb)
			printf "64 B round trip (us): ib_send_lat %.1f (busy), raw verbs events %.1f (one goroutine) %.1f (a goroutine per end); rdma busy/ib_send_lat %.2fx, rdma default/raw verbs %.2fx, rdma one process/raw verbs a goroutine per end %.2fx (<1: rdma.Conn faster)\n",
				median("ib_send_lat pingpong 64"), median("verbs pingpong 64"), median("verbs-2g pingpong 64"),
				median("rdma-busy pingpong 64") / median("ib_send_lat pingpong 64"), median("rdma pingpong 64") / median("verbs pingpong 64"),
				median("rdma-1p pingpong 64") / median("verbs-2g pingpong 64")
	}' "$OUT/results.txt" | sort
