#!/usr/bin/env bash
# softroce-mixed.sh: mixed-fleet tests on a real kernel RDMA stack, in the
# Soft-RoCE VM of ../shared/softroce (what `make test-softroce-mixed` runs).
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
# The guest image has no veth module: this script takes veth.ko from the
# Debian package of the kernel the image boots (apt-get download, cached
# under ~/.cache/softroce-mixed) and the guest loads it.
#
# Why not rxe on both ends, each in its own namespace: the guest's kernel
# (Debian 12, 6.1) opens rxe's UDP socket in the initial namespace only, so
# an rxe device on a netdev in another namespace never receives (rping
# between two such devices: RDMA_CM_EVENT_UNREACHABLE).
#
# Environment: GO, SOFTROCE_RUN, SOFTROCE_RACE ("-race" or ""), TESTFLAGS.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
. scripts/softroce-run.sh
RACE=${SOFTROCE_RACE--race}
OUT=build/softroce-mixed
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/softroce-mixed

if [ ! -x "$RUN" ]; then
	echo "test-softroce-mixed: $RUN not found; set SOFTROCE_RUN to the path of softroce's run-in-vm.sh" >&2
	exit 2
fi

# The kernel package run-in-vm.sh boots (it resolves linux-image-amd64 the same way).
kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
if [ -z "$kpkg" ]; then
	echo "test-softroce-mixed: cannot resolve linux-image-amd64 with apt-cache (run apt-get update first)" >&2
	exit 2
fi
kver=${kpkg#linux-image-}
mkdir -p "$CACHE"
if [ ! -f "$CACHE/veth-$kver.ko" ]; then
	echo "test-softroce-mixed: fetching veth.ko from $kpkg"
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	(cd "$tmp" && apt-get download "$kpkg" >/dev/null)
	dpkg-deb --fsys-tarfile "$tmp"/*.deb | tar -x -C "$tmp" --wildcards "./lib/modules/$kver/kernel/drivers/net/veth.ko*"
	f=$(ls "$tmp/lib/modules/$kver/kernel/drivers/net/"veth.ko*)
	case "$f" in
	*.xz) xz -dc "$f" >"$CACHE/veth-$kver.ko" ;;
	*.zst) zstd -qdc "$f" >"$CACHE/veth-$kver.ko" ;;
	*) cp "$f" "$CACHE/veth-$kver.ko" ;;
	esac
fi

rm -rf "$OUT"
mkdir -p "$OUT"
cp "$CACHE/veth-$kver.ko" "$OUT/veth.ko"
echo "test-softroce-mixed: building test binaries ($RACE)"
# shellcheck disable=SC2086
$GO test $RACE -c -o "$OUT/rdma.test" .
# shellcheck disable=SC2086
$GO test $RACE -c -o "$OUT/collectives.test" ./collectives

cat >"$OUT/run.sh" <<'GUEST'
#!/bin/sh
# Runs in the guest. busybox's sh runs its own ip applet for a bare "ip":
# iproute2's is /bin/ip.
IP=/bin/ip
insmod ./veth.ko || { echo "insmod veth.ko failed (guest kernel $(uname -r))"; exit 125; }
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
