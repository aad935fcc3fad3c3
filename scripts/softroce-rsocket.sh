#!/usr/bin/env bash
# softroce-rsocket.sh: the Go side in rsocket mode (rdma.Config.Wire =
# "rsocket", examples/rsocket) against rdma-core's own rsockets programs, in
# one Soft-RoCE guest run:
#   - rstream (-T v: data verified) as client against the Go server, and the
#     Go client against rstream as server, at several sizes and counts;
#   - a plain C TCP echo program (examples/c/rsocket/echo.c) run with
#     LD_PRELOAD=librspreload.so, as client against the Go echo server and as
#     server for the Go echo client: data checked, and the half-close
#     (shutdown(SHUT_WR) / CloseWrite, then EOF) both ways;
#   - peer death both ways: a killed C peer is EOF to the Go side, a killed
#     Go peer is EOF to the C side (as a dead TCP peer's FIN);
#   - RsocketConn's own tests (nettest, half-close, peer close, ...) on the
#     rdmacore provider;
#   - timing: 64 B round trips (rstream -S 64 -C 1 -I N) and a 64 KiB stream
#     (-S 65536 -C N), rstream to rstream and with the Go side in either
#     role, printed as ratios (the guest is emulated: only ratios mean
#     anything). rstream runs blocking (-T b) there, as the Go side does by
#     default, and verifying (-T v), as the Go side always does; the 64 B
#     round trips run once more with both sides polling without sleeping
#     (rstream's default, the Go side's Config.BusyPoll: "rtt64busy").
#
#   scripts/softroce-rsocket.sh         (part of make test-softroce)
#
# Environment: GO, SOFTROCE_RUN, RTT_ITERS (default 100), STREAM_COUNT
# (default 100), ROUNDS (default 1: the timing runs that many times,
# interleaved, and prints medians); BUILD_ONLY=1 builds the guest directory
# and stops.
. "$(dirname "$0")/softroce-run.sh"
CC=${CC:-cc}
OUT=build/softroce-rsocket
[ -x "$RUN" ] || { echo "softroce-rsocket: $RUN not found; set SOFTROCE_RUN" >&2; exit 2; }
rm -rf "$OUT"
mkdir -p "$OUT"
$GO build -o "$OUT/rsocket" ./examples/rsocket
$CC -O2 -Wall -o "$OUT/echo" examples/c/rsocket/echo.c
$GO test -c -o "$OUT/root.test" .

cat >"$OUT/run.sh" <<GUEST
#!/bin/sh
# Runs in the guest. Every program is bounded by a timeout: a hang fails.
ip=\$SOFTROCE_IP
PRELOAD=\$(ls /usr/lib/*/rsocket/librspreload.so 2>/dev/null | head -1)
RTT_ITERS=${RTT_ITERS:-100}
ROUNDS=${ROUNDS:-1}
STREAM_COUNT=${STREAM_COUNT:-100}
export RDMA_PROVIDER=rdmacore
status=0
port=7470
fail() { echo "FAIL: \$*"; status=1; }
# waitfor LOG: until the server started in the background says it listens on
# this round's port (LOG may still hold the previous round's line: the
# background shell truncates it only when it gets to run).
waitfor() { i=0; while ! grep -q "listening on .*:\$port\$" "\$1" 2>/dev/null; do i=\$((i+1)); [ \$i -lt 100 ] || return 1; sleep 0.1; done; }
[ -n "\$PRELOAD" ] || { echo "FAIL: librspreload.so not found"; exit 1; }
echo "== librspreload: \$PRELOAD"

echo "== rstream client -> Go server (rsocket mode), data verified"
for sc in "16 1" "64 1000" "1000 300" "4096 300" "65536 100" "1048576 8"; do
	set -- \$sc; port=\$((port+1))
	timeout 120 ./rsocket rstream-server -addr \$ip:\$port -S \$1 -C \$2 >srv.log 2>&1 & p=\$!
	waitfor srv.log || fail "Go server did not start"
	timeout 120 rstream -s \$ip -p \$port -S \$1 -C \$2 -T v | grep -v '^name' || fail "rstream client S=\$1 C=\$2"
	wait \$p || fail "Go server S=\$1 C=\$2"
	cat srv.log
done

echo "== Go client (rsocket mode) -> rstream server, data verified"
for sc in "16 1" "64 1000" "1000 300" "4096 300" "65536 100" "1048576 8"; do
	set -- \$sc; port=\$((port+1))
	timeout 120 rstream -b \$ip -p \$port -S \$1 -C \$2 -T v >srv.log 2>&1 & p=\$!
	sleep 1
	timeout 120 ./rsocket rstream-client -addr \$ip:\$port -S \$1 -C \$2 || fail "Go client S=\$1 C=\$2"
	wait \$p || { cat srv.log; fail "rstream server S=\$1 C=\$2"; }
done

echo "== C echo client (LD_PRELOAD=librspreload.so) -> Go echo server: data checked, shutdown(SHUT_WR) then EOF"
for n in 1 65536 3000000; do
	port=\$((port+1))
	timeout 120 ./rsocket echo-server -addr \$ip:\$port >srv.log 2>&1 & p=\$!
	waitfor srv.log || fail "Go echo server did not start"
	LD_PRELOAD=\$PRELOAD timeout 120 ./echo client \$ip \$port \$n || fail "C echo client \$n"
	wait \$p || fail "Go echo server \$n"
	cat srv.log
done

echo "== Go echo client -> C echo server (LD_PRELOAD=librspreload.so): data checked, CloseWrite then EOF"
for n in 1 65536 3000000; do
	port=\$((port+1))
	LD_PRELOAD=\$PRELOAD timeout 120 ./echo server \$ip \$port & p=\$!
	sleep 1
	timeout 120 ./rsocket echo-client -addr \$ip:\$port -bytes \$n || fail "Go echo client \$n"
	wait \$p || fail "C echo server \$n"
done

echo "== peer death: the C client is killed; the Go side reads EOF"
port=\$((port+1))
timeout 60 ./rsocket sink -addr \$ip:\$port >srv.log 2>&1 & p=\$!
waitfor srv.log || fail "Go sink did not start"
# The Go sink never echoes: the C client blocks in recv after its send.
LD_PRELOAD=\$PRELOAD ./echo client \$ip \$port 4096 & c=\$!
sleep 2
kill -9 \$c
wait \$p || fail "Go side after the C peer died"
cat srv.log
grep -q 'then EOF' srv.log || fail "Go side did not read EOF after the C peer died"

# A peer killed while the other reads: what a C rsockets reader sees of a
# killed C rsockets peer is the reference, and a killed Go peer must look
# the same to it.
echo "== peer death: the server is killed while a C client (LD_PRELOAD, poll+recv) reads"
port=\$((port+1))
# killsink: a C sink reads from the server \$p on this round's port; after
# 2 s the server is killed, and eof says what the sink saw.
killsink() {
	LD_PRELOAD=\$PRELOAD timeout 20 ./echo sink \$ip \$port >sink.log 2>&1 & c=\$!
	sleep 2
	kill -9 \$p
	wait \$c
	eof="no EOF within 20 s"; grep -q 'then EOF' sink.log && eof=EOF
}
LD_PRELOAD=\$PRELOAD ./echo server \$ip \$port >/dev/null 2>&1 & p=\$!
sleep 1
killsink; ref=\$eof
echo "C server killed: C client: \$ref"
port=\$((port+1))
./rsocket echo-server -addr \$ip:\$port >srv.log 2>&1 & p=\$!
waitfor srv.log || fail "Go echo server did not start"
killsink; got=\$eof
echo "Go server killed: C client: \$got"
[ "\$got" = "\$ref" ] || fail "a killed Go peer looks different from a killed C peer to a C reader"

echo "== 64 B round trips, 20 of them, every pairing"
port=\$((port+1))
timeout 60 ./rsocket rstream-server -addr \$ip:\$port -S 64 -C 1 -I 20 >srv.log 2>&1 & p=\$!
waitfor srv.log || fail "Go server did not start"
timeout 60 rstream -s \$ip -p \$port -S 64 -C 1 -I 20 -T b -T v | grep custom || fail "rtt rstream client -> Go server"
wait \$p || fail "rtt Go server"; cat srv.log
port=\$((port+1))
timeout 60 rstream -b \$ip -p \$port -S 64 -C 1 -I 20 -T b -T v >/dev/null 2>&1 & p=\$!
timeout 60 ./rsocket rstream-client -addr \$ip:\$port -S 64 -C 1 -I 20 || fail "rtt Go client -> rstream server"
wait \$p || fail "rtt rstream server"

echo "== RsocketConn's tests on rdmacore (\$SOFTROCE_DEV)"
timeout 600 ./root.test -test.count=1 -test.run 'Rsocket' -test.v >rt.log 2>&1 || { cat rt.log; fail "RsocketConn tests"; }
grep -E '^(--- |ok|FAIL|PASS)' rt.log

echo "== timing (usec per transfer; a round trip is two)"
# run_pair NAME SERVER CLIENT: one timed run, printing "NAME usec"
# \$3: blocking (b) or polling without sleeping (busy)
rstream_srv() { w=-Tb; [ "\$3" = busy ] && w=; timeout 120 rstream -b \$ip -p \$1 \$w -T v \$2 >/dev/null 2>&1; }
go_srv() { w=; [ "\$3" = busy ] && w=-busypoll; timeout 120 ./rsocket rstream-server -addr \$ip:\$1 \$w \$2 >/dev/null 2>&1; }
rstream_cli() { w=-Tb; [ "\$3" = busy ] && w=; timeout 120 rstream -s \$ip -p \$1 \$w -T v \$2 | awk '\$1=="custom" {print \$8}'; }
go_cli() { w=; [ "\$3" = busy ] && w=-busypoll; timeout 120 ./rsocket rstream-client -addr \$ip:\$1 \$w \$2 | awk '{print \$6}'; }
for r in \$(seq 1 \$ROUNDS); do
for test in "rtt64:b:-S 64 -C 1 -I \$RTT_ITERS" "stream64k:b:-S 65536 -C \$STREAM_COUNT" "rtt64busy:busy:-S 64 -C 1 -I \$RTT_ITERS"; do
	name=\${test%%:*}; rest=\${test#*:}; mode=\${rest%%:*}; args=\${rest#*:}
	for pair in "rstream-rstream rstream_srv rstream_cli" "rstream-client/go-server go_srv rstream_cli" \
		"go-client/rstream-server rstream_srv go_cli" "go-go go_srv go_cli"; do
		set -- \$pair; port=\$((port+1))
		\$2 \$port "\$args" \$mode & p=\$!
		sleep 1
		us=\$(\$3 \$port "\$args" \$mode)
		wait \$p || fail "timing \$name \$1"
		echo "timing \$name \$1 \$us \$r" | tee -a timing.log
	done
done
done
# per test and pairing: the median of the rounds, against rstream to
# rstream's median, and the median of each round's ratio (the two ran
# seconds apart, so a slow round of the emulated guest slows both)
awk 'function med(a, n,    i, j, t) {
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	\$1=="timing" && \$4 > 0 {k = \$2" "\$3; v[k, \$5] = \$4; keys[k] = 1; if (\$5 > rounds) rounds = \$5}
	END {
		for (k in keys) {
			split(k, a, " "); b = a[1]" rstream-rstream"
			n = 0; m = 0
			for (r = 1; r <= rounds; r++) {
				if ((k, r) in v) x[++n] = v[k, r]
				if ((k, r) in v && (b, r) in v) q[++m] = v[k, r] / v[b, r]
			}
			nb = 0
			for (r = 1; r <= rounds; r++) if ((b, r) in v) y[++nb] = v[b, r]
			if (n == 0 || nb == 0) continue
			mk = med(x, n); mb = med(y, nb)
			printf "ratio %s %s %.2f (median of %d rounds, %s us, against rstream-rstream %s us; by rounds %.2f)\n", a[1], a[2], mk / mb, n, mk, mb, m ? med(q, m) : 0
		}
	}' timing.log | sort
exit \$status
GUEST
chmod +x "$OUT/run.sh"

[ -z "${BUILD_ONLY:-}" ] || exit 0
echo "softroce-rsocket: running in the Soft-RoCE VM"
"$RUN" "$OUT" ./run.sh
