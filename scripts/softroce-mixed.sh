#!/usr/bin/env bash
# softroce-mixed.sh: mixed-fleet tests on a real kernel RDMA stack, in the
# Soft-RoCE VM of scripts/softroce (what `make test-softroce-mixed` runs).
#
# In the guest, a veth pair joins the guest's own namespace, whose end
# carries an rxe device (rxenear), to a namespace "far" whose end has none:
# a host without an RDMA device across a wire. The rdma package's
# TestMixedSilentPeerRDMACore dials it with provider auto and must fall back
# to soft after Config.RDMAConnectTimeout (the connect request is never
# answered); TestMixedFleetRDMACore (one listener, both providers; fallback
# on REJECTED), collectives' TestMixedGroupRDMACore (2 rdmacore + 2 soft
# ranks) and TestMixedWireRDMACore (2 ranks here on rdmacore, 1 across the
# wire on soft) run too. Addresses 10.77.1.1 and 10.77.1.2 exist only inside the
# guest, which has no network card.
#
# Why not rxe on both ends, each in its own namespace: the guest's kernel
# (Debian 12, 6.1) opens rxe's UDP socket in the initial namespace only, so
# an rxe device on a netdev in another namespace never receives (rping
# between two such devices: RDMA_CM_EVENT_UNREACHABLE).
#
# Environment: GO, SOFTROCE_RUN, SOFTROCE_RACE ("-race" or ""), TESTFLAGS.
. "$(dirname "$0")/softroce-run.sh"
softroce_out softroce-mixed
echo "test-softroce-mixed: building test binaries ($RACE)"
# shellcheck disable=SC2086
$GO test $RACE -c -o "$OUT/rdma.test" .
# shellcheck disable=SC2086
$GO test $RACE -c -o "$OUT/collectives.test" ./collectives

cat >"$OUT/run.sh" <<'GUEST'
#!/bin/sh
# Runs in the guest (the runner loads veth at boot). busybox's sh runs its
# own ip applet for a bare "ip": iproute2's is /bin/ip.
IP=/bin/ip
mkdir -p /run/netns
$IP netns add far &&
	$IP link add vnear type veth peer name vfar netns far &&
	$IP addr add 10.77.1.1/24 dev vnear && $IP link set vnear up &&
	$IP -n far addr add 10.77.1.2/24 dev vfar && $IP -n far link set vfar up &&
	$IP -n far link set lo up &&
	rdma link add rxenear type rxe netdev vnear || { echo "network setup failed"; exit 125; }
i=0
until rdma link show rxenear/1 2>/dev/null | grep -q 'state ACTIVE'; do
	i=$((i + 1))
	[ $i -lt 200 ] || { echo "rxenear did not become ACTIVE: $(rdma link show 2>&1)"; exit 125; }
	sleep 0.05
done
echo "== $(rdma link show rxenear/1); far: $($IP -n far -br addr show vfar)"
status=0
echo "== rdma: mixed fleet on $SOFTROCE_DEV, and a peer without RDMA across the veth wire"
MIXED_NETNS=far MIXED_PEER=10.77.1.2 ./rdma.test -test.count=1 -test.timeout=5m -test.v \
	-test.run 'TestMixedFleetRDMACore|TestMixedSilentPeerRDMACore' $TESTFLAGS || status=1
echo "== collectives: a group of rdmacore and soft ranks; one across the wire"
MIXED_NETNS=far MIXED_PEER=10.77.1.2 MIXED_LOCAL=10.77.1.1 ./collectives.test -test.count=1 -test.timeout=5m -test.v \
	-test.run 'TestMixedGroupRDMACore|TestMixedWireRDMACore' $TESTFLAGS || status=1
exit $status
GUEST
chmod +x "$OUT/run.sh"

echo "test-softroce-mixed: running in the Soft-RoCE VM"
SOFTROCE_PASSENV="${SOFTROCE_PASSENV:-GOTRACEBACK GODEBUG GOMAXPROCS GOGC} TESTFLAGS" TESTFLAGS="${TESTFLAGS:-}" \
	"$RUN" "$OUT" ./run.sh
