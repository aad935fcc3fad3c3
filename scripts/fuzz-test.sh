#!/usr/bin/env bash
# Every fuzz target in the module, each run for a count of executions
# (scripts/fuzz-counts; about 8 s each on a 2-CPU machine).
#
# Counts and not durations: with -fuzztime set to a duration, Go's fuzzing
# coordinator now and then ends a run whose time is up with a bare "context
# deadline exceeded" and no failing input (a race between the deadline's
# context and its child's, worse on a loaded machine). A count sets no
# deadline. FUZZTIME=60s (a duration) still runs every target that long.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZMINIMIZETIME=${FUZZMINIMIZETIME:-1s}
counts=scripts/fuzz-counts
module=$($GO list -m)
for pkg in $($GO list ./...); do
	for f in $($GO test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true); do
		if [ -n "${FUZZTIME:-}" ]; then
			budget=$FUZZTIME
		else
			rel=${pkg#"$module"}; rel=.${rel}
			n=$(awk -v p="$rel" -v f="$f" '$1 == p && $2 == f { print $3 }' "$counts")
			if [ -z "$n" ]; then
				echo "fuzz $pkg $f: no count in $counts (add '$rel $f N', N about 8 s of its executions)" >&2
				exit 1
			fi
			budget=${n}x
		fi
		echo "fuzz $pkg $f ($budget)"
		if ! out=$($GO test -run '^$' -fuzz "^$f\$" -fuzztime "$budget" \
			-fuzzminimizetime "$FUZZMINIMIZETIME" "$pkg" 2>&1); then
			echo "$out"
			exit 1
		fi
		echo "$out" | tail -n 2
	done
done
