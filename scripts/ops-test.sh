#!/usr/bin/env bash
# ops-test.sh: what `make test-ops` runs, checking the library as a new user
# and an operator meet it:
#   0. the README's first screen says how to get the library (go get, the Go
#      release) and has the set-up commands and the modules;
#   1. the module, promrdma and cmd/perfplot build and vet with the oldest Go
#      release go.mod declares (GOTOOLCHAIN=go<that release>, fetched through
#      the module proxy when it is not installed);
#   2. a fresh module outside the repository, in a temporary directory, gets
#      the library with `go get` against a copy of this tree (a replace
#      directive), on that release: the README's first Go program builds and
#      prints what it says, and `go test` runs the Example functions of the
#      root package and of collectives;
#   3. promrdma's metrics pass `promtool check metrics` and a real Prometheus
#      server scrapes them (PROMRDMA_TOOLS=required: a missing promtool or
#      prometheus fails; make deps installs Debian's prometheus package).
#      Both listen on 127.0.0.1 only and stop by themselves.
#
# Environment: GO (go).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
GO=${GO:-go}
export GOFLAGS=${GOFLAGS:--buildvcs=false}

min=$(sed -n 's/^go \([0-9.]*\)$/\1/p' go.mod)
[ -n "$min" ] || { echo "ops-test: no go line in go.mod" >&2; exit 1; }
# A library declares the oldest release it needs: a Go version's first
# (1.N or 1.N.0), not a patch release only some users have.
if [[ $min =~ ^1\.[0-9]+\.[1-9][0-9]*$ ]]; then
	echo "ops-test: go.mod declares go $min, a patch release; declare the oldest release the module builds with (a toolchain line may name a newer one)" >&2
	exit 1
fi
for m in promrdma cmd/perfplot; do
	got=$(sed -n 's/^go \([0-9.]*\)$/\1/p' $m/go.mod)
	[ "$got" = "$min" ] || { echo "ops-test: $m/go.mod says go $got, go.mod go $min" >&2; exit 1; }
done
# The README's first screen: how to get it, the two set-up commands, the
# modules.
screen=$(head -n 60 README.md)
for want in "go get github.com/rdmanet/rdma" "make demo" "make test" "Modules" "Go $(echo "$min" | cut -d. -f1,2)"; do
	grep -qF -- "$want" <<<"$screen" || { echo "ops-test: the README's first 60 lines lack \"$want\"" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
export GOTOOLCHAIN=go$min
echo "ops-test: building with the oldest Go declared: $($GO version)"
# Commands are built into the temporary directory, never into the tree.
$GO build -o "$tmp/bin/" ./... && $GO vet ./...
$GO -C promrdma build -o "$tmp/bin/" ./... && $GO -C promrdma vet ./...
$GO -C cmd/perfplot build -o "$tmp/bin/" ./... && $GO -C cmd/perfplot vet ./...
# A copy of the tree as it is (committed or not), without build output.
mkdir "$tmp/rdma"
git ls-files -co --exclude-standard -z | grep -zv '^build/' | tar -C "$REPO" --null -T - -cf - | tar -C "$tmp/rdma" -xf -
mkdir "$tmp/user"
cd "$tmp/user"
cat > go.mod <<MOD
module example.com/rdmauser

go $min

replace github.com/rdmanet/rdma => ../rdma
MOD
# The README's first Go program, as a user would paste it.
awk '/^```go$/ {on=1; next} on && /^```$/ {exit} on {print}' "$REPO/README.md" > main.go
grep -q '^package main$' main.go || { echo "ops-test: the README's first Go block is not a program" >&2; exit 1; }
# Any version: the replace directive points every one at the copy.
$GO get github.com/rdmanet/rdma@v0.0.0
$GO mod tidy
out=$(timeout 60 $GO run .)
[ "$out" = hello ] || { echo "ops-test: the README's program printed \"$out\", not hello" >&2; exit 1; }
echo "ops-test: the README's program, built in a fresh module: $out"
# The Examples, run by go test from the user's module (the test-only
# requirements of the library are fetched as go test needs them).
GOFLAGS="$GOFLAGS -mod=mod" timeout 300 $GO test -count=1 -run '^Example' -v \
	github.com/rdmanet/rdma github.com/rdmanet/rdma/collectives | tee "$tmp/examples.txt" | grep -E '^(--- |ok|FAIL)'
n=$(grep -c '^--- PASS: Example' "$tmp/examples.txt" || true)
[ "$n" -ge 6 ] || { echo "ops-test: $n Examples passed, not 6 or more" >&2; exit 1; }
cd "$REPO"

# Prometheus: promtool and a real scrape (on the current toolchain).
unset GOTOOLCHAIN
PROMRDMA_TOOLS=required $GO -C promrdma test -race -count=1 -run '^(TestPromtoolCheckMetrics|TestPrometheusScrape)$' -v ./... | grep -E '^(--- |ok|FAIL)'
echo "ops-test: ok"
