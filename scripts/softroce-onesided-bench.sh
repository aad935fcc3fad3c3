#!/usr/bin/env bash
# softroce-onesided-bench.sh: in one Soft-RoCE guest run, 1 MiB RDMA WRITE
# and READ through rdma.Conn's one-sided API (BenchmarkRemoteRDMACore: one
# operation in flight per goroutine, 1 and 4 goroutines) beside perftest's
# ib_write_bw and ib_read_bw (which keep up to their tx depth in flight), and
# a stream of 1 MiB Writes over rdma.Conn between two processes, copying and
# from and into Buffers (the rendezvous: the reader READs the writer's
# Buffer), with the user CPU time of both processes per message; for ROUNDS
# interleaved rounds, and the ratios of the medians. The guest is emulated
# (TCG): only ratios from one run mean anything.
#
#   scripts/softroce-onesided-bench.sh       (COUNT=40 STREAM_COUNT=200 ROUNDS=3 by default)
. "$(dirname "$0")/softroce-run.sh"
COUNT=${COUNT:-40}
STREAM_COUNT=${STREAM_COUNT:-200}
ROUNDS=${ROUNDS:-3}
softroce_out softroce-onesided
$GO test -c -o "$OUT/rdma.test" .
$GO build -o "$OUT/softroce-bench" ./cmd/softroce-bench

cat >"$OUT/run.sh" <<GUEST
#!/bin/sh
ip=\$SOFTROCE_IP
for r in \$(seq 1 $ROUNDS); do
	for t in write read; do
		ib_\${t}_bw -d \$SOFTROCE_DEV -F -n $COUNT -s 1048576 >/dev/null 2>&1 & p=\$!
		sleep 1
		ib_\${t}_bw -d \$SOFTROCE_DEV -F -n $COUNT -s 1048576 "\$ip" |
			awk -v t=\$t '\$1==1048576 && NF>=5 {printf "ib_%s_bw g0 %.3f\n", t, \$4}'
		wait \$p
	done
	./rdma.test -test.run '^\$' -test.bench RemoteRDMACore -test.benchtime ${COUNT}x |
		awk '/^BenchmarkRemoteRDMACore/ {split(\$1, a, "/"); sub(/-[0-9]+\$/, "", a[4]); for (i = 1; i <= NF; i++) if (\$(i+1) == "MB/s") printf "rdma_%s %s %s\n", a[2], a[4], \$i}'
	# a stream of 1 MiB Writes, copying and from Buffers, and from Buffers
	# with Config.BusyPoll (perftest polls its CQ without sleeping): MB/s,
	# then the user CPU of both processes per message in ms
	# bufferswin: Buffers exposed through memory windows (rdma.Conn
	# registers on rxe unless RDMA_MEMORY_WINDOWS=1)
	for m in copy buffers bufferswin buffersbusy; do
		f=""; w=; [ \$m = buffers ] && f=-buffers
		[ \$m = bufferswin ] && f=-buffers && w=1
		[ \$m = buffersbusy ] && f="-buffers -busypoll"
		RDMA_MEMORY_WINDOWS=\$w ./softroce-bench -test stream -size 1048576 -count $STREAM_COUNT -procs 2 \$f |
			awk -v m=\$m '\$2=="stream" {mb=\$6; cpu=\$(NF-3)} \$1=="server" {cpu+=\$2} END {printf "stream_%s g0 %s\nstreamcpu_%s g0 %.3f\n", m, mb, m, cpu*1000/$STREAM_COUNT}'
	done
done
GUEST
chmod +x "$OUT/run.sh"
"$RUN" "$OUT" ./run.sh | tee "$OUT/results"
# Medians per (what, goroutines), then the ratios to perftest's (perftest's
# MB is 2^20 bytes, Go's benchmarks' 10^6).
# Also the median of the rounds' own ratios of the Buffers stream to
# ib_read_bw: a round's two figures share the guest's state, which drifts
# across a run.
awk '
	function median(s,    n, a, i, j, t) {
		n = split(substr(s, 2), a, " ")
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
		return a[int((n + 1) / 2)]
	}
	{ k = $1 " " $2; v[k] = v[k] " " $3; round[k]++; at[k, round[k]] = $3 }
	END {
		for (k in v) {
			n = split(substr(v[k], 2), a, " ")
			for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
			med[k] = a[int((n + 1) / 2)]
		}
		split("write read", ops, " ")
		for (o = 1; o <= 2; o++) {
			op = ops[o]; ib = med["ib_" op "_bw g0"]
			printf "1 MiB %s: ib_%s_bw %.1f MiB/s", op, op, ib
			for (g = 1; g <= 4; g *= 4) {
				k = "rdma_" op " g" g
				if (k in med && ib > 0) printf "; rdma.Conn %d goroutine(s) %.1f MiB/s (%.2fx)", g, med[k] / 1.048576, med[k] / 1.048576 / ib
			}
			printf "\n"
		}
		ib = med["ib_read_bw g0"]
		if (("stream_buffers g0") in med && ib > 0)
			printf "1 MiB stream (two processes): copying %.1f MiB/s (%.2fx ib_read_bw), %.1f ms user CPU a message; from and into Buffers %.1f MiB/s (%.2fx ib_read_bw), %.1f ms user CPU a message (%.2fx the copying path\047s)\n",
				med["stream_copy g0"] / 1.048576, med["stream_copy g0"] / 1.048576 / ib, med["streamcpu_copy g0"],
				med["stream_buffers g0"] / 1.048576, med["stream_buffers g0"] / 1.048576 / ib, med["streamcpu_buffers g0"],
				(med["streamcpu_copy g0"] > 0 ? med["streamcpu_buffers g0"] / med["streamcpu_copy g0"] : 0)
		rr = ""
		for (i = 1; i <= round["stream_buffers g0"]; i++)
			if (at["ib_read_bw g0", i] > 0) rr = rr " " sprintf("%.3f", at["stream_buffers g0", i] / 1.048576 / at["ib_read_bw g0", i])
		if (rr != "")
			printf "1 MiB stream from and into Buffers against ib_read_bw, the median of the rounds\047 ratios: %.2fx (rounds:%s)\n", median(rr), rr
		if (("stream_bufferswin g0") in med && ib > 0)
			printf "1 MiB stream from and into Buffers, through memory windows (RDMA_MEMORY_WINDOWS=1): %.1f MiB/s (%.2fx ib_read_bw), %.1f ms user CPU a message\n",
				med["stream_bufferswin g0"] / 1.048576, med["stream_bufferswin g0"] / 1.048576 / ib, med["streamcpu_bufferswin g0"]
		if (("stream_buffersbusy g0") in med && ib > 0)
			printf "1 MiB stream from and into Buffers with BusyPoll (as perftest polls): %.1f MiB/s (%.2fx ib_read_bw), %.1f ms user CPU a message\n",
				med["stream_buffersbusy g0"] / 1.048576, med["stream_buffersbusy g0"] / 1.048576 / ib, med["streamcpu_buffersbusy g0"]
	}' "$OUT/results"
