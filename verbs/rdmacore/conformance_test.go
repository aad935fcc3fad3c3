//go:build cgo && linux

package rdmacore

import (
	"strings"
	"testing"

	"github.com/rdmanet/rdma/internal/testsupport"
	"github.com/rdmanet/rdma/verbs"
	"github.com/rdmanet/rdma/verbs/verbstest"
)

// kernelDiffers lists the conformance subtests whose expectation is not what
// the kernel's RDMA stack does on Soft-RoCE (kernel 6.1, rdma-core 44), each
// with what the kernel does instead. They are differences in the suite or in
// the soft provider, not in rdmacore, which reports what the device says.
var kernelDiffers = map[string]string{}

// recvInErrUnflushed is rxe's (kernel 6.1) one difference in
// ModifyToErrFlushes; TestKernelRecvInErrUnflushed pins it.
const recvInErrUnflushed = "rxe (kernel 6.1) leaves a receive posted after the QP entered ERR in the queue, " +
	"without a flush completion (hardware flushes it)"

// deregReadStalls is what rxe (kernel 6.1) does with a READ whose
// responder deregisters the region mid-response: the requester gets no
// completion (seen in the guest for 40 s).
const deregReadStalls = "rxe (kernel 6.1) gives a READ whose responder deregistered the region mid-response no completion"

// The verbs conformance suite, the one the soft provider passes, on a real
// kernel RDMA stack (Soft-RoCE in the VM of `make test-softroce`).
func TestConformance(t *testing.T) {
	dev, ip := testsupport.SoftRoCE(t)
	var noDmaBuf string
	if strings.HasPrefix(dev, "rxe") {
		noDmaBuf = "rxe has no dma-buf support (its driver lacks reg_user_mr_dmabuf)"
	}
	verbstest.Run(t, verbstest.Config{
		Provider: ProviderName,
		IP:       ip,
		// A peer whose QP is in ERR drops every packet silently (rxe's
		// receive checks): to the other side it is a host that stopped
		// answering, while the connection stays up.
		SilencePeer: func(t *testing.T, peer verbs.QP) {
			if err := peer.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.QPAttrState); err != nil {
				t.Fatalf("silencing the peer: %v", err)
			}
		},
		DmaBufUnsupported:  noDmaBuf,
		Skip:               kernelDiffers,
		RecvInErrUnflushed: recvInErrUnflushed,
		DeregReadStalls:    deregReadStalls,
	})
}
