#!/bin/sh
# hide-rdma-core.sh CMD...: run CMD where rdma-core's headers and libraries
# are absent. Meant to run as root in a private mount namespace of its own
# (unshare --mount --propagation private), which takes the mounts away with it:
# empty tmpfs over /usr/include/infiniband and /usr/include/rdma, and an
# overlay over each library directory that holds libibverbs or librdmacm, with
# those files deleted in it.
set -eu
scratch=$(mktemp -d)
mount -t tmpfs rdma-core-hidden "$scratch"
for d in /usr/include/infiniband /usr/include/rdma; do
	if [ -d "$d" ]; then mount -t tmpfs rdma-core-hidden "$d"; fi
done
dirs=$(for f in /lib/*/libibverbs.so* /lib/*/librdmacm.so* /usr/lib/*/libibverbs.so* /usr/lib/*/librdmacm.so* \
	/lib/libibverbs.so* /lib/librdmacm.so* /usr/lib/libibverbs.so* /usr/lib/librdmacm.so* \
	/lib64/libibverbs.so* /lib64/librdmacm.so* /usr/lib64/libibverbs.so* /usr/lib64/librdmacm.so* \
	/usr/local/lib*/libibverbs.so* /usr/local/lib*/librdmacm.so* \
	/usr/local/lib/*/libibverbs.so* /usr/local/lib/*/librdmacm.so*; do
	[ -e "$f" ] && dirname "$(readlink -f "$f")"
done | sort -u)
n=0
for d in $dirs; do
	n=$((n + 1))
	mkdir -p "$scratch/$n/upper" "$scratch/$n/work"
	mount -t overlay rdma-core-hidden -o "lowerdir=$d,upperdir=$scratch/$n/upper,workdir=$scratch/$n/work" "$d"
	rm -f "$d"/libibverbs.so* "$d"/librdmacm.so*
done
for f in /lib/*/libibverbs.so.1 /usr/lib/*/libibverbs.so.1 /usr/lib64/libibverbs.so.1 /usr/include/infiniband/verbs.h; do
	if [ -e "$f" ]; then echo "hide-rdma-core.sh: $f is still there" >&2; exit 1; fi
done
exec "$@"
