#!/usr/bin/env bash
# softroce-conns.sh: cmd/rdmaconns on the rdmacore provider in the Soft-RoCE
# guest (scripts/softroce): N connections held in one process, per endpoint
# the registered memory (all of it pinned by the device), resident memory,
# descriptors and setup time, beside the guest kernel's TCP in the same run.
#
#   scripts/softroce-conns.sh     (N=1000; one VM at a time on a shared host: flock(1))
#
# N connections with the default Config: a connection's ring and send
# buffer start at 64 KiB and grow only under load, so an idle one registers
# about 132 KiB whatever Config.RingSize is (1,000 of them pin some 260 MiB
# of the guest's memory).
. "$(dirname "$0")/softroce-run.sh"
N=${N:-1000}
softroce_out softroce-conns
$GO build -o "$OUT/rdmaconns" ./cmd/rdmaconns
cat >"$OUT/run.sh" <<GUEST
#!/bin/sh
status=0
ulimit -n 65536
echo "== rdmaconns -n $N -paths rdmacore -addr \$SOFTROCE_IP (default Config)"
./rdmaconns -q -n $N -paths rdmacore -addr "\$SOFTROCE_IP" || status=1
exit \$status
GUEST
chmod +x "$OUT/run.sh"
SOFTROCE_MEM=${SOFTROCE_MEM:-2048} "$RUN" "$OUT" ./run.sh
