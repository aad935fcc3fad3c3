package rdma

import "github.com/rdmanet/rdma/internal/stream"

// The stream protocol lives in internal/stream, with its tests. These are
// its names as this package's tests (rawpeer_test.go, mixed_test.go) use
// them to play a peer.

type hello struct {
	version   uint8
	recvDepth uint16
	ringAddr  uint64
	ringKey   uint32
	ringLog   uint8
	growLog   uint8 // 0: ringLog (the ring does not grow)
	heartbeat uint16
}

func (h hello) marshal() []byte {
	return stream.Hello{Version: h.version, RecvDepth: h.recvDepth, RingAddr: h.ringAddr, RingKey: h.ringKey, RingLog: h.ringLog, GrowLog: max(h.growLog, h.ringLog), Heartbeat: h.heartbeat}.Marshal()
}

func parseHello(b []byte) (hello, error) {
	h, err := stream.ParseHello(b)
	return hello{version: h.Version, recvDepth: h.RecvDepth, ringAddr: h.RingAddr, ringKey: h.RingKey, ringLog: h.RingLog, growLog: h.GrowLog, heartbeat: h.Heartbeat}, err
}

const (
	protoVersion   = stream.Version
	rejectBadHello = stream.RejectBadHello
	rejectNoRes    = stream.RejectNoResources
	immKindShift   = stream.ImmKindShift
	ctlFin         = stream.CtlFin
	ctlPing        = stream.CtlPing
	ctlPong        = stream.CtlPong
)

var (
	errHello      = stream.ErrHello
	parseReject   = stream.ParseReject
	marshalReject = stream.MarshalReject
	immData       = stream.ImmData
	immCredit     = stream.ImmCredit
	immCtl        = stream.ImmCtl
)
