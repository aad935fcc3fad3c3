# The common start of the softroce-*.sh scripts, which source it first
# (. "$(dirname "$0")/softroce-run.sh"): it stops the script at its first
# failure and runs it from the repository's root, with GO the go command,
# RUN the Soft-RoCE VM runner (scripts/softroce/run-in-vm.sh, unless
# SOFTROCE_RUN names another) and RACE the test binaries' -race flag
# (SOFTROCE_RACE= builds them without). softroce_out NAME sets OUT to
# build/NAME, empty: the guest's directory.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
GO=${GO:-go}
RUN=${SOFTROCE_RUN:-$PWD/scripts/softroce/run-in-vm.sh}
RACE=${SOFTROCE_RACE--race}

softroce_out() {
	OUT=build/$1
	rm -rf "$OUT"
	mkdir -p "$OUT"
}
