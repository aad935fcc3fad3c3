# Sourced by the softroce-*.sh scripts: sets RUN to softroce's run-in-vm.sh.
# SOFTROCE_RUN wins; else it lives beside the checkout (../shared), or at the
# workspace's shared path when the clone is elsewhere.
RUN=${SOFTROCE_RUN:-}
if [ -z "$RUN" ]; then
	for f in ../shared/softroce/run-in-vm.sh /work/shared/softroce/run-in-vm.sh; do
		if [ -x "$f" ]; then
			RUN=$f
			break
		fi
	done
fi
RUN=${RUN:-../shared/softroce/run-in-vm.sh}
