#!/usr/bin/env bash
# softroce-bench-apps.sh: bench/ (real applications over rdma beside Go's
# TCP, client and servers in separate processes) on the rdmacore provider in
# the Soft-RoCE guest (scripts/softroce). The guest is emulated: only the
# ratios of one run mean anything, never the absolute figures.
#
#   scripts/softroce-bench-apps.sh   (ROUNDS=3 T=1s RAFT_ENTRIES=2000 WORKLOADS= (all) by default)
#
# The report lands in build/softroce-bench-apps/: apps.json, apps.svg and the
# table in out.txt.
. "$(dirname "$0")/softroce-run.sh"
ROUNDS=${ROUNDS:-3}
T=${T:-1s}
RAFT_ENTRIES=${RAFT_ENTRIES:-2000}
WORKLOADS=${WORKLOADS:-}
softroce_out softroce-bench-apps
$GO -C bench build -o "$PWD/$OUT/bench-apps" .
cat >"$OUT/run.sh" <<GUEST
#!/bin/sh
ulimit -n 65536
echo "== bench-apps -paths rdmacore -host \$SOFTROCE_IP -rounds $ROUNDS -t $T -raft-entries $RAFT_ENTRIES -workloads '$WORKLOADS'"
./bench-apps -paths rdmacore -host "\$SOFTROCE_IP" -rounds $ROUNDS -t $T -raft-entries $RAFT_ENTRIES \
	-workloads '$WORKLOADS' -json apps.json -svg apps.svg
status=\$?
echo "== apps.json"
cat apps.json
echo "== apps.svg"
cat apps.svg
exit \$status
GUEST
chmod +x "$OUT/run.sh"
status=0
SOFTROCE_MEM=${SOFTROCE_MEM:-2048} "$RUN" "$OUT" ./run.sh >"$OUT/out.txt" 2>&1 || status=$?
# The guest's files come back in its output: split them out.
sed -n '/^== apps.json$/,/^== apps.svg$/p' "$OUT/out.txt" | sed '1d;$d' >"$OUT/apps.json"
sed -n '/^== apps.svg$/,$p' "$OUT/out.txt" | sed '1d' >"$OUT/apps.svg"
sed -n '1,/^== apps.json$/p' "$OUT/out.txt" | sed '$d'
echo "softroce-bench-apps: report in $OUT/apps.json, drawn in $OUT/apps.svg (exit $status)"
exit $status
