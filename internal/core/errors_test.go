package core

import (
	"errors"
	"syscall"
	"testing"

	"github.com/rdmanet/rdma/verbs"
)

// A failed work completion becomes the connection error whose errno says
// the same to programs; a status without an error of its own is EIO.
func TestWCError(t *testing.T) {
	for _, tc := range []struct {
		s     verbs.WCStatus
		named error // nil: a status without an error of its own
		want  syscall.Errno
	}{
		{verbs.WCWRFlushErr, ErrReset, syscall.ECONNRESET},
		{verbs.WCRetryExcErr, ErrRetry, syscall.ETIMEDOUT},
		{verbs.WCRNRRetryExcErr, ErrRNR, syscall.ETIMEDOUT},
		{verbs.WCRemAccessErr, ErrRemoteAccess, syscall.EACCES},
		{verbs.WCLocProtErr, nil, syscall.EIO},
	} {
		err := WCError(tc.s)
		if !errors.Is(err, tc.want) {
			t.Errorf("WCError(%v) = %v, not %v", tc.s, err, tc.want)
		}
		if tc.named != nil && err != tc.named {
			t.Errorf("WCError(%v) = %v, not %v", tc.s, err, tc.named)
		}
	}
	if got := ProtoError("x").Error(); got != "rdma: protocol error: x" {
		t.Errorf("ProtoError: %q", got)
	}
}
