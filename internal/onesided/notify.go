package onesided

import "errors"

// NotifyValueMax is the largest value a notification carries: the
// immediate's low 29 bits (internal/stream's CtlNotify).
const NotifyValueMax = 1<<29 - 1

// ErrRemoteAccess is matched by the error of a write or read that the
// peer's device refused: a wrong rkey, out of the registered bounds, an
// access the registration does not grant, or a registration that ended.
// As on any RDMA device, the refusal also breaks the connection.
var ErrRemoteAccess = errors.New("the peer's device refused the access (wrong rkey, out of bounds, access not granted, or no longer exposed); the connection is broken")
