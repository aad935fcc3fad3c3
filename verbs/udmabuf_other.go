//go:build !linux

package verbs

import "errors"

// Udmabuf is host memory exported as a dma-buf, on Linux only.
type Udmabuf struct{}

// ErrNoUdmabuf says that the system offers no udmabuf device.
var ErrNoUdmabuf = errors.New("verbs: no udmabuf device (dma-bufs are Linux's)")

// AllocUdmabuf fails: dma-bufs are Linux's.
func AllocUdmabuf(int) (*Udmabuf, error) { return nil, ErrNoUdmabuf }

func (*Udmabuf) Fd() int       { return -1 }
func (*Udmabuf) Len() int      { return 0 }
func (*Udmabuf) Bytes() []byte { return nil }
func (*Udmabuf) Close() error  { return nil }
