#!/usr/bin/env bash
# run-in-vm.sh: run a program on a real kernel RDMA stack, the kernel's
# Soft-RoCE driver (rdma_rxe), inside a throw-away QEMU guest, and exit with
# the program's status.
#
#   run-in-vm.sh DIR CMD [ARGS...]   DIR becomes /work in the guest; CMD runs there
#   run-in-vm.sh PROG [ARGS...]      PROG is copied to /work and run
#   run-in-vm.sh --selftest          ibv_devinfo, rping, ib_send_bw, ib_write_bw, rstream
#   run-in-vm.sh --build             build (or reuse) the cached guest image only
#
# Exit status: the program's; 124 when SOFTROCE_TIMEOUT expires; 125 when the
# image, the VM or the RDMA setup in the guest failed. See scripts/softroce/README.md.
#
# In the guest the program runs as root in /work, stdin /dev/null, its stdout
# and stderr on ours, with SOFTROCE_IP (the RDMA netdev's address, which
# exists only in the guest: it has no network card) and SOFTROCE_DEV (rxe0).
#
# Environment (all optional):
#   SOFTROCE_TIMEOUT     seconds before the VM is killed (900)
#   SOFTROCE_EXTRA_PKGS  more Debian packages for the guest, e.g. "strace"
#   SOFTROCE_PASSENV     host variables copied into the guest
#                        (GOTRACEBACK GODEBUG GOMAXPROCS GOGC)
#   SOFTROCE_CACHE       image cache (${XDG_CACHE_HOME:-~/.cache}/rdma-softroce)
#   SOFTROCE_CPUS, SOFTROCE_MEM   guest vCPUs (2) and MiB of RAM (1536)
#   SOFTROCE_IP          guest address/prefix of the RDMA netdev (10.77.0.1/24)
#   SOFTROCE_MTU         netdev MTU (1500: RoCE MTU 1024; 4200 and up: 4096)
#   SOFTROCE_ACCEL       auto, kvm or tcg (auto: kvm when the host really has it)
#   SOFTROCE_VERBOSE=1   the guest's console (kernel and init) on stderr
#   SOFTROCE_REBUILD=1   rebuild the cached image
set -euo pipefail

PROG=$(basename "$0")
# Bump when the image's recipe changes in a way its cache key does not show.
RECIPE=1

fail() { # fail MESSAGE: the VM or its setup failed (status 125)
	echo "$PROG: $*" >&2
	exit 125
}
say() { echo "$PROG: $*" >&2; }

TIMEOUT=${SOFTROCE_TIMEOUT:-900}
EXTRA_PKGS=${SOFTROCE_EXTRA_PKGS:-}
PASSENV=${SOFTROCE_PASSENV:-GOTRACEBACK GODEBUG GOMAXPROCS GOGC}
CACHE=${SOFTROCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rdma-softroce}
CPUS=${SOFTROCE_CPUS:-2}
MEM=${SOFTROCE_MEM:-1536}
NET=${SOFTROCE_IP:-10.77.0.1/24}
MTU=${SOFTROCE_MTU:-1500}
ACCEL=${SOFTROCE_ACCEL:-auto}
VERBOSE=${SOFTROCE_VERBOSE:-0}
# The guest's clock: under TCG the kernel finds the emulated TSCs
# "unsynchronized" and falls back to the HPET, whose every read is an
# emulated device access (6 us per clock_gettime measured in the guest, 15x
# a system call), where a real host reads the TSC in the vDSO. Programs that
# read the clock often (Go's scheduler does, on every wake-up) would pay
# for the emulation, not for their own work, and ratios against C tools that
# rarely read it would be skewed. QEMU derives every vCPU's TSC from the
# host's clock, so it is trusted here (SOFTROCE_CLOCK="" gives the kernel its
# own choice). SOFTROCE_APPEND adds kernel arguments.
CLOCK_ARGS=${SOFTROCE_CLOCK-tsc=reliable clocksource=tsc}
APPEND=${SOFTROCE_APPEND:-}

# What the guest runs: rdma-core's userspace (libibverbs with the rxe provider,
# librdmacm) and its tools, perftest, iproute2 (ip, ss, rdma) and busybox for
# the rest. Dependencies are followed only into shared libraries (Debian's
# section "libs"): the others serve dpkg's maintainer scripts, not programs.
PACKAGES="busybox-static libc6 libibverbs1 librdmacm1 ibverbs-providers ibverbs-utils
rdmacm-utils perftest iproute2 $EXTRA_PKGS"
# Kernel modules, dependencies added by modprobe: virtio for the ports that
# carry the program's output, dummy for the netdev under rxe, veth for tests
# that build a wire to a second namespace.
MODULES="virtio_pci virtio_console dummy veth crc32_generic rdma_rxe ib_uverbs rdma_ucm"

case $CPUS$MEM$TIMEOUT$MTU in *[!0-9]*) fail "SOFTROCE_CPUS, SOFTROCE_MEM, SOFTROCE_TIMEOUT and SOFTROCE_MTU are numbers" ;; esac

# ---- host tools -------------------------------------------------------------

need_host_tools() {
	local -a pkgs=()
	command -v apt-get >/dev/null || fail "needs a Debian 12 (bookworm) amd64 host with apt-get"
	command -v qemu-system-x86_64 >/dev/null || pkgs+=(qemu-system-x86)
	command -v modprobe >/dev/null || pkgs+=(kmod)
	command -v xz >/dev/null || pkgs+=(xz-utils)
	[ ${#pkgs[@]} -eq 0 ] && return
	[ "$(id -u)" = 0 ] || fail "missing host packages; install them: sudo apt-get install --no-install-recommends ${pkgs[*]}"
	say "installing ${pkgs[*]}"
	apt-get update -qq >/dev/null
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null ||
		fail "apt-get install ${pkgs[*]} failed"
}

# ---- the guest image --------------------------------------------------------

# kernel_package: the Debian kernel image package linux-image-amd64 points to.
kernel_package() {
	local k
	k=$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9].*\)$/\1/p' | head -n 1)
	if [ -z "$k" ] && [ "$(id -u)" = 0 ]; then
		apt-get update -qq >/dev/null
		k=$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9].*\)$/\1/p' | head -n 1)
	fi
	[ -n "$k" ] || fail "apt-cache cannot resolve linux-image-amd64 (apt-get update?)"
	echo "$k"
}

# closure PKG...: PKG and the shared libraries they need, recursively.
closure() {
	local -A seen=()
	local -a frontier=("$@") deps next
	local p section
	for p in "$@"; do seen[$p]=1; done
	while [ ${#frontier[@]} -gt 0 ]; do
		mapfile -t deps < <(apt-cache depends --no-recommends --no-suggests --no-conflicts \
			--no-breaks --no-replaces --no-enhances "${frontier[@]}" |
			sed -n 's/^ *|\{0,1\}\(Pre\)\{0,1\}Depends: \([^<][^ ]*\)$/\2/p' | sort -u)
		next=()
		[ ${#deps[@]} -gt 0 ] || break
		while read -r p section; do
			[ "$section" = libs ] && [ -z "${seen[$p]:-}" ] || continue
			seen[$p]=1
			next+=("$p")
		done < <(apt-cache show --no-all-versions "${deps[@]}" 2>/dev/null |
			awk '/^Package:/ { p = $2 } /^Section:/ { print p, $2 }')
		frontier=("${next[@]}")
	done
	printf '%s\n' "${!seen[@]}" | sort
}

download() { # download DIR PKG...
	local dir=$1
	shift
	(cd "$dir" && apt-get download -qq -o APT::Sandbox::User="$(id -un)" "$@" >/dev/null 2>apt.log) && return
	[ "$(id -u)" = 0 ] || fail "apt-get download failed: $(cat "$dir/apt.log")"
	apt-get update -qq >/dev/null
	(cd "$dir" && apt-get download -qq -o APT::Sandbox::User="$(id -un)" "$@" >/dev/null 2>apt.log) ||
		fail "apt-get download failed: $(cat "$dir/apt.log")"
}

# The guest's /init: mount, load the modules, create rxe0 on a dummy netdev,
# run /payload/cmd with its output on the virtio ports, report its status on
# a third port, power off.
write_init() {
	cat >"$1" <<'EOF'
#!/bin/sh
export PATH=/work:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs shm /dev/shm
mount -t tmpfs run /run
mount -t tmpfs tmp /tmp
exec </dev/null >/dev/console 2>&1
. /payload/env
log() { echo "init: $*"; }
status_port=
halt() {
	[ -n "$status_port" ] && echo "$1" >"$status_port"
	echo "init: exit $1"
	poweroff -f
}
die() {
	log "setup failed: $*"
	halt 125
}
while read -r m; do
	insmod "/lib/modules/$(uname -r)/$m" || die "insmod $m"
done </etc/modules.order
port() { # port NAME: /dev node of the virtio-serial port NAME
	for n in /sys/class/virtio-ports/*/name; do
		[ "$(cat "$n" 2>/dev/null)" = "$1" ] && { d=${n%/name}; echo "/dev/${d##*/}"; return 0; }
	done
	return 1
}
i=0
until status_port=$(port status) && [ -c "$status_port" ]; do
	i=$((i + 1)); [ $i -le 100 ] || die "no virtio port 'status'"; sleep 0.05
done
out=$(port stdout) || die "no virtio port 'stdout'"
err=$(port stderr) || die "no virtio port 'stderr'"
ip link set lo up || die "lo"
ip link add eth0 type dummy && ip link set eth0 mtu "$GUEST_MTU" &&
	ip addr add "$GUEST_NET" dev eth0 && ip link set eth0 up || die "netdev eth0"
rdma link add rxe0 type rxe netdev eth0 || die "rdma link add rxe0"
i=0
until [ -c /dev/infiniband/rdma_cm ] && rdma link show rxe0/1 | grep -q 'state ACTIVE'; do
	i=$((i + 1)); [ $i -le 100 ] || die "rxe0 not ACTIVE: $(rdma link show 2>&1)"; sleep 0.05
done
log "$(rdma link show rxe0/1)"
ulimit -l unlimited
ulimit -n 65536
cd /work || die "no /work"
sh /payload/cmd >"$out" 2>"$err"
halt $?
EOF
	chmod 755 "$1"
}

# extract_vmlinux VMLINUZ OUT: the uncompressed ELF kernel, which QEMU boots
# through its PVH entry: under TCG that skips seconds of decompression a boot.
extract_vmlinux() {
	local off
	off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$1" | head -n 1 | cut -d: -f1) || return 1
	[ -n "$off" ] || return 1
	tail -c "+$((off + 1))" "$1" | xz -dc >"$2" 2>/dev/null
	[ "$(head -c 4 "$2" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ]
}

build_image() { # build_image DIR
	local dest=$1 tmp kpkg kver root m t0=$SECONDS
	tmp=$(mktemp -d "$CACHE/build.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	kpkg=$(kernel_package)
	say "building the guest image in $dest: $kpkg and rdma-core's userspace from Debian"
	mkdir -p "$tmp/kernel" "$tmp/debs" "$tmp/root"
	download "$tmp/kernel" "$kpkg"
	# shellcheck disable=SC2086 # word lists
	download "$tmp/debs" $(closure $PACKAGES)

	dpkg-deb -x "$tmp"/kernel/*.deb "$tmp/kernel"
	kver=$(ls "$tmp/kernel/lib/modules")
	grep -q '^CONFIG_RDMA_RXE=[ym]' "$tmp/kernel/boot/config-$kver" || fail "$kpkg has no rdma_rxe"
	root=$tmp/root
	for m in "$tmp"/debs/*.deb; do dpkg-deb -x "$m" "$root"; done
	rm -rf "$root"/usr/share/{doc,man,info,locale,lintian} "$root"/etc/init.d "$root"/lib/systemd
	mkdir -p "$root"/{proc,sys,dev,run,tmp,work,root,payload,etc}
	# busybox supplies every command the packages do not
	for m in $("$root/bin/busybox" --list); do
		[ -e "$root/bin/$m" ] || [ -e "$root/sbin/$m" ] || [ -e "$root/usr/bin/$m" ] ||
			[ -e "$root/usr/sbin/$m" ] || ln -s busybox "$root/bin/$m"
	done
	# the modules and their dependencies, in load order
	depmod -b "$tmp/kernel" "$kver"
	# shellcheck disable=SC2086
	for m in $MODULES; do
		modprobe -d "$tmp/kernel" -S "$kver" -C /dev/null --show-depends "$m" || fail "no module $m in $kpkg"
	done | awk '$1 == "insmod" && !seen[$2]++ { print $2 }' | while read -r m; do
		m=${m#*/lib/modules/"$kver"/}
		mkdir -p "$root/lib/modules/$kver/$(dirname "$m")"
		case $m in
		*.xz)
			xz -dc "$tmp/kernel/lib/modules/$kver/$m" >"$root/lib/modules/$kver/${m%.xz}"
			m=${m%.xz}
			;;
		*) cp "$tmp/kernel/lib/modules/$kver/$m" "$root/lib/modules/$kver/$m" ;;
		esac
		echo "$m" >>"$root/etc/modules.order"
	done
	printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
	printf 'root:x:0:\n' >"$root/etc/group"
	printf '127.0.0.1 localhost\n::1 localhost\n' >"$root/etc/hosts"
	printf 'passwd: files\ngroup: files\nhosts: files\n' >"$root/etc/nsswitch.conf"
	write_init "$root/init"
	# every tool finds its libraries in the image
	local lib="$root/lib/x86_64-linux-gnu:$root/usr/lib/x86_64-linux-gnu" f miss
	for f in usr/bin/ibv_devinfo usr/bin/rping usr/bin/rstream usr/bin/ib_send_bw bin/ip bin/ss usr/bin/rdma \
		usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so; do
		[ -e "$root/$f" ] || fail "image check: no $f"
		miss=$("$root/lib64/ld-linux-x86-64.so.2" --library-path "$lib" --list "$root/$f" 2>&1 | grep 'not found' || true)
		[ -z "$miss" ] || fail "image check: $f: $miss"
	done

	mkdir -p "$tmp/out"
	if extract_vmlinux "$tmp/kernel/boot/vmlinuz-$kver" "$tmp/out/kernel" &&
		grep -q '^CONFIG_PVH=y' "$tmp/kernel/boot/config-$kver"; then
		:
	else
		cp "$tmp/kernel/boot/vmlinuz-$kver" "$tmp/out/kernel"
	fi
	cp "$root/bin/busybox" "$tmp/out/busybox"
	# uncompressed: under TCG the guest unpacks a plain cpio faster than it gunzips
	(cd "$root" && find . -mindepth 1 | LC_ALL=C sort | "$tmp/out/busybox" cpio -o -H newc -R 0:0 2>/dev/null) \
		>"$tmp/out/initrd"
	{
		echo "kernel $kpkg ($kver)"
		echo "modules $(tr '\n' ' ' <"$root/etc/modules.order")"
		echo "packages $(cd "$tmp/debs" && echo *.deb)"
		echo "built $(date -u +%FT%TZ) in $((SECONDS - t0)) s"
	} >"$tmp/out/manifest"
	rm -rf "$dest"
	mv "$tmp/out" "$dest"
	rm -rf "$tmp"
	trap - EXIT
	say "image built in $((SECONDS - t0)) s ($(du -sh "$dest" | cut -f1))"
}

# image: sets IMG to a usable cached image, building it under a lock when
# missing. The key covers the recipe, the kernel package's version and the
# package list, so a Debian point release or SOFTROCE_EXTRA_PKGS gets its own.
IMG=
image() {
	need_host_tools
	mkdir -p "$CACHE"
	local key
	key=$(
		echo "$RECIPE $MODULES"
		echo "$PACKAGES" | tr -s ' \n' '\n\n' | sort -u
		apt-cache policy linux-image-amd64 2>/dev/null | sed -n 's/^ *Candidate: //p'
	)
	IMG=$CACHE/image-$(echo "$key" | cksum | cut -d' ' -f1)
	[ "${SOFTROCE_REBUILD:-0}" != 1 ] && [ -s "$IMG/manifest" ] && return
	exec 8>"$CACHE/lock"
	flock 8
	if [ "${SOFTROCE_REBUILD:-0}" = 1 ] || [ ! -s "$IMG/manifest" ]; then build_image "$IMG"; fi
	exec 8>&-
}

# ---- running a program ------------------------------------------------------

quote() { printf "'%s'" "${1//\'/\'\\\'\'}"; } # for the guest's sh
qemu_path() { printf '%s' "${1//,/,,}"; }      # for a QEMU option value

accel() {
	case $ACCEL in
	kvm | tcg) echo "$ACCEL" ;;
	auto)
		# Only real hardware virtualisation: some sandboxes offer a /dev/kvm on
		# which a stock kernel hangs at boot.
		if [ -w /dev/kvm ] && { [ -d /sys/module/kvm_intel ] || [ -d /sys/module/kvm_amd ]; }; then
			echo kvm
		else
			echo tcg
		fi
		;;
	*) fail "SOFTROCE_ACCEL is auto, kvm or tcg" ;;
	esac
}

RUN=
run() {
	local payload=$1 v a
	shift
	[ -e "$payload" ] || fail "no such file or directory: $payload"
	image
	RUN=$(mktemp -d "${TMPDIR:-/tmp}/softroce.XXXXXX")
	trap 'rm -rf "$RUN"' EXIT
	mkdir -p "$RUN/root/payload" "$RUN/root/work"
	local -a argv
	if [ -d "$payload" ]; then
		[ $# -ge 1 ] || fail "$payload is a directory: name the command to run in it"
		cp -a "$payload"/. "$RUN/root/work"
		argv=("$@")
	else
		[ -x "$payload" ] || fail "$payload is not executable"
		cp "$payload" "$RUN/root/work"
		argv=("./$(basename "$payload")" "$@")
	fi
	{
		for v in $PASSENV; do
			[ -n "${!v+set}" ] && echo "export $v=$(quote "${!v}")"
		done
		echo "export SOFTROCE_IP=$(quote "${NET%/*}") SOFTROCE_DEV=rxe0"
		printf exec
		for a in "${argv[@]}"; do printf ' %s' "$(quote "$a")"; done
		echo
	} >"$RUN/root/payload/cmd"
	echo "GUEST_NET=$(quote "$NET") GUEST_MTU=$MTU" >"$RUN/root/payload/env"
	# The initramfs is the cached image followed by this run's files; the
	# kernel unpacks concatenated cpio archives, each 4-byte aligned.
	cp "$IMG/initrd" "$RUN/initrd"
	truncate -s "%512" "$RUN/initrd"
	(cd "$RUN/root" && find . -mindepth 1 | LC_ALL=C sort | "$IMG/busybox" cpio -o -H newc -R 0:0 2>/dev/null) >>"$RUN/initrd"

	# The program's output streams to ours as it runs: QEMU writes each port
	# into a pipe to a cat that holds our stdout or stderr. Not our stdout
	# itself: QEMU would open it anew, and a file would then have two write
	# offsets, ours overwriting what QEMU wrote.
	local out err console=$RUN/console mode catout caterr
	exec {out}> >(cat)
	catout=$!
	exec {err}> >(cat >&2)
	caterr=$!
	[ "$VERBOSE" = 1 ] && console=/dev/fd/$err
	mode=$(accel)
	local -a qemu=(qemu-system-x86_64 -nodefaults -no-user-config -display none -no-reboot
		-m "$MEM" -smp "$CPUS" -kernel "$IMG/kernel" -initrd "$RUN/initrd"
		-append "console=ttyS0 loglevel=4 panic=-1 mitigations=off $CLOCK_ARGS $APPEND"
		-chardev "file,id=console,path=$(qemu_path "$console"),append=on" -serial chardev:console
		-device virtio-serial-pci
		-chardev "file,id=stdout,path=/dev/fd/$out" -device virtserialport,chardev=stdout,name=stdout
		-chardev "file,id=stderr,path=/dev/fd/$err" -device virtserialport,chardev=stderr,name=stderr
		-chardev "file,id=status,path=$RUN/status" -device virtserialport,chardev=status,name=status)
	if [ "$mode" = kvm ]; then qemu+=(-accel kvm -cpu host); else qemu+=(-accel tcg,thread=multi -cpu max); fi

	# timeout runs QEMU in a process group of its own: forward our signals.
	local rc=0 t0=$SECONDS pid
	timeout -k 10 "$TIMEOUT" "${qemu[@]}" </dev/null &
	pid=$!
	trap 'kill $pid 2>/dev/null; wait $pid; exit 130' INT
	trap 'kill $pid 2>/dev/null; wait $pid; exit 143' TERM HUP
	wait $pid || rc=$?
	trap - INT TERM HUP
	exec {out}>&- {err}>&-
	wait "$catout" "$caterr" 2>/dev/null || true
	if grep -qE 'BUG:|WARNING:|Oops|Call Trace:' "$RUN/console" 2>/dev/null; then
		say "the guest kernel logged a warning or oops:"
		grep -E -A12 'BUG:|WARNING:|Oops' "$RUN/console" | head -n 40 >&2 || true
	fi
	if [ $rc = 124 ] || [ $rc = 137 ]; then
		say "timed out after ${TIMEOUT} s (SOFTROCE_TIMEOUT; $mode)"
		tail -n 20 "$RUN/console" >&2 2>/dev/null || true
		exit 124
	fi
	local status
	status=$(tr -dc 0-9 <"$RUN/status" 2>/dev/null || true)
	if [ -z "$status" ]; then
		say "the VM stopped without the program's status (qemu exit $rc; $mode)"
		tail -n 40 "$RUN/console" >&2 2>/dev/null || true
		exit 125
	fi
	if [ "$status" = 125 ] && grep -q '^init: setup failed' "$RUN/console" 2>/dev/null; then
		tail -n 40 "$RUN/console" >&2 || true
	fi
	[ "$VERBOSE" = 1 ] && say "VM ran $((SECONDS - t0)) s ($mode), status $status"
	exit "$status"
}

selftest() {
	local dir
	dir=$(mktemp -d "${TMPDIR:-/tmp}/softroce-selftest.XXXXXX")
	trap 'rm -rf "$dir"' EXIT
	cat >"$dir/selftest" <<'EOF'
#!/bin/sh
# rdma-core's own tools over rxe0 on $SOFTROCE_IP. Each server runs in the
# background; its client starts once the server's port listens, on TCP or
# on the RDMA CM.
set -e
ip=$SOFTROCE_IP
listening() { # listening PORT
	ss -Hltn "sport = :$1" | grep -q . ||
		rdma resource show cm_id 2>/dev/null | grep 'state LISTEN' | grep -q ":$1 "
}
pair() { # pair PORT SERVER-CMD... -- CLIENT-CMD...
	port=$1
	shift
	server=
	while [ "$1" != -- ]; do server="$server $1"; shift; done
	shift
	log=$(mktemp)
	$server >"$log" 2>&1 &
	pid=$!
	i=0
	until listening "$port"; do
		i=$((i + 1))
		[ $i -le 200 ] || { echo "nothing listens on port $port"; cat "$log"; exit 1; }
		sleep 0.05
	done
	"$@"
	wait $pid || { cat "$log"; exit 1; }
	rm -f "$log"
}
echo "== rdma link show"; rdma link show
echo "== ibv_devinfo"; ibv_devinfo -d "$SOFTROCE_DEV"
echo "== rping"; pair 7174 rping -s -a "$ip" -C 3 -- rping -c -a "$ip" -C 3 -v
echo "== ib_send_bw (RC SEND, 64 KiB x 200)"
pair 18515 ib_send_bw -d "$SOFTROCE_DEV" -F -n 200 -s 65536 -- ib_send_bw -d "$SOFTROCE_DEV" -F -n 200 -s 65536 "$ip"
echo "== ib_write_bw over rdma_cm (RDMA WRITE, 64 KiB x 200)"
pair 18515 ib_write_bw -d "$SOFTROCE_DEV" -R -F -n 200 -s 65536 -- ib_write_bw -d "$SOFTROCE_DEV" -R -F -n 200 -s 65536 "$ip"
echo "== rstream (rsockets, 64 KiB x 100)"
pair 7471 rstream -b "$ip" -S 65536 -C 100 -- rstream -s "$ip" -S 65536 -C 100
echo "selftest: OK"
EOF
	chmod +x "$dir/selftest"
	local rc=0
	(run "$dir" ./selftest) || rc=$?
	exit $rc
}

case ${1:-} in
-h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' ;;
"")
	sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
--selftest) selftest ;;
--build)
	image
	cat "$IMG/manifest"
	;;
-*) fail "unknown option $1 (see --help)" ;;
*) run "$@" ;;
esac
