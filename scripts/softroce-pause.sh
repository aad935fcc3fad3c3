#!/usr/bin/env bash
# softroce-pause.sh: a paused peer process on rdmacore, in the Soft-RoCE VM
# of scripts/softroce: rdma.Conn's suite's pause subtests (internal/conntest,
# pause.go and peer.go), where a peer process is stopped (SIGSTOP) for
# twice the transport's retry window, for 4/5 of PeerTimeout and past it,
# while the kernel's rxe goes on acknowledging for it.
#
#   scripts/softroce-pause.sh
#
# Environment: GO (go), SOFTROCE_RUN (path of run-in-vm.sh), SOFTROCE_RACE
# ("-race", or "" to build without the race detector), TESTFLAGS (extra
# flags for the test binary).
. "$(dirname "$0")/softroce-run.sh"
softroce_out softroce-pause
echo "softroce-pause: building verbs/rdmacore's tests ($RACE)"
# shellcheck disable=SC2086
$GO test $RACE -c -o "$OUT/rdmacore.test" ./verbs/rdmacore

cat >"$OUT/run.sh" <<'GUEST'
#!/bin/sh
# Runs in the guest, in the directory holding the test binary.
echo "== verbs/rdmacore on $SOFTROCE_DEV ($SOFTROCE_IP): a paused peer process"
./rdmacore.test -test.count=1 -test.timeout=10m -test.v -test.run 'TestConnSuite$/^Peer(Paused|PausedUnderTimeout|Stopped|Killed)$' $TESTFLAGS
GUEST
chmod +x "$OUT/run.sh"

echo "softroce-pause: running in the Soft-RoCE VM"
SOFTROCE_PASSENV="${SOFTROCE_PASSENV:-GOTRACEBACK GODEBUG GOMAXPROCS GOGC} TESTFLAGS" TESTFLAGS="${TESTFLAGS:-}" \
	"$RUN" "$OUT" ./run.sh
