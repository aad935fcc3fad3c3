# Sourced by the softroce-*.sh scripts: RUN is the Soft-RoCE VM runner,
# scripts/softroce/run-in-vm.sh, unless SOFTROCE_RUN names another.
RUN=${SOFTROCE_RUN:-$PWD/scripts/softroce/run-in-vm.sh}
