#!/usr/bin/env bash
# softroce-conns.sh: cmd/rdmaconns on the rdmacore provider in the Soft-RoCE
# guest (scripts/softroce): N connections held in one process, per endpoint
# the registered memory (all of it pinned by the device), resident memory,
# descriptors and setup time, beside the guest kernel's TCP in the same run.
#
#   scripts/softroce-conns.sh     (N=1000 RING=65536 N_DEFAULT=200; one VM at a time on a shared host: flock(1))
#
# N connections with Config.RingSize RING (the guest's memory holds 1,000
# with 64 KiB rings, not with the default 1 MiB, since registration pins
# every page), then N_DEFAULT with the default Config.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
. scripts/softroce-run.sh
N=${N:-1000}
RING=${RING:-65536}
N_DEFAULT=${N_DEFAULT:-200}
OUT=build/softroce-conns
rm -rf "$OUT"
mkdir -p "$OUT"
$GO build -o "$OUT/rdmaconns" ./cmd/rdmaconns
cat >"$OUT/run.sh" <<GUEST
#!/bin/sh
status=0
ulimit -n 65536
echo "== rdmaconns -n $N -ring $RING -paths rdmacore -addr \$SOFTROCE_IP"
./rdmaconns -q -n $N -ring $RING -paths rdmacore -addr "\$SOFTROCE_IP" || status=1
echo "== rdmaconns -n $N_DEFAULT -paths rdmacore -addr \$SOFTROCE_IP (default Config)"
./rdmaconns -q -n $N_DEFAULT -paths rdmacore -addr "\$SOFTROCE_IP" || status=1
exit \$status
GUEST
chmod +x "$OUT/run.sh"
SOFTROCE_MEM=${SOFTROCE_MEM:-2048} "$RUN" "$OUT" ./run.sh
