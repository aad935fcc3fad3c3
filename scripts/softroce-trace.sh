#!/usr/bin/env bash
# softroce-trace.sh: trace rdma.Conn's 64 B ping-pong with the guest kernel's
# ftrace, to see what the slow round trips were. In one Soft-RoCE guest run
# the two-process ping-pong of cmd/softroce-bench runs while ftrace
# records scheduler switches and wake-ups, soft IRQs, timer expiries and the
# futex, nanosleep and epoll_pwait calls; the client marks each round trip
# slower than MARK_OVER in the trace. The trace is left in
# build/softroce-trace/trace.txt, and the script prints who preempted the
# benchmark's threads, in the slow round trips and in all.
#
#   scripts/softroce-trace.sh           (COUNT=3000 MARK_OVER=200us FLAGS=-busypoll)
. "$(dirname "$0")/softroce-run.sh"
COUNT=${COUNT:-3000}
MARK_OVER=${MARK_OVER:-200us}
FLAGS=${FLAGS:--busypoll}
softroce_out softroce-trace
$GO build -o "$OUT/softroce-bench" ./cmd/softroce-bench

cat >"$OUT/run.sh" <<GUEST
#!/bin/sh
T=/sys/kernel/tracing
[ -e \$T/trace ] || mount -t tracefs nodev \$T
echo 20000 >\$T/buffer_size_kb
for e in sched/sched_switch sched/sched_wakeup irq/softirq_entry irq/softirq_exit \\
	timer/hrtimer_expire_entry syscalls/sys_enter_futex syscalls/sys_enter_nanosleep \\
	syscalls/sys_enter_epoll_pwait; do
	echo 1 >\$T/events/\$e/enable
done
echo >\$T/trace
echo 1 >\$T/tracing_on
./softroce-bench -test pingpong -size 64 -count $COUNT -procs 2 $FLAGS -mark-over $MARK_OVER -mark-file \$T/trace_marker
echo 0 >\$T/tracing_on
echo "=== trace"
gzip -c \$T/trace | base64
GUEST
chmod +x "$OUT/run.sh"

"$RUN" "$OUT" ./run.sh >"$OUT/guest.out"
sed '/^=== trace/,$d' "$OUT/guest.out"
sed '1,/^=== trace/d' "$OUT/guest.out" | base64 -d | gunzip >"$OUT/trace.txt"

# A thread of softroce-bench taken off its CPU while runnable, and by whom:
# the runtime's monitor thread (the one that calls nanosleep), another of the
# programs' threads, or a kernel thread; counted over the whole run and in
# the windows of the marked round trips (each ends at its marker and reaches
# back the time it names).
awk '
# sysmon sleeps in nanosleep; other threads park on futexes and only
# seldom nanosleep (in the runtime short spins).
function role(pid, comm) {
	if (comm != "softroce-bench") return comm
	return (ns[pid] > 4 * fx[pid]) ? "Go runtime monitor (sysmon)" : "another Go thread"
}
/sys_nanosleep\(/ { split($1, a, "-"); ns[a[length(a)]]++ }
/sys_futex\(/ { split($1, a, "-"); fx[a[length(a)]]++ }
/prev_comm=softroce-bench .*prev_state=R/ {
	t = $4 + 0; match($0, /next_comm=[^ ]+ next_pid=[0-9]+/)
	split(substr($0, RSTART, RLENGTH), f, /[= ]/)
	n++; pt[n] = t; pc[n] = f[2]; pp[n] = f[4]
}
/tracing_mark_write: slow round trip/ {
	m++; mt[m] = $4 + 0; mu[m] = $(NF - 1) / 1e6
}
END {
	for (i = 1; i <= n; i++) all[role(pp[i], pc[i])]++
	for (j = 1; j <= m; j++) {
		hit = 0
		for (i = 1; i <= n; i++)
			if (pt[i] <= mt[j] && pt[i] >= mt[j] - mu[j]) { slow[role(pp[i], pc[i])]++; hit = 1 }
		hits += hit
	}
	printf "round trips over %s: %d; with a benchmark thread preempted in them: %d\n", "'"$MARK_OVER"'", m, hits
	for (r in all) printf "  preempted by %s: %d in all, %d in slow round trips\n", r, all[r], slow[r]
}' "$OUT/trace.txt"
