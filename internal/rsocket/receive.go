package rsocket

import "errors"

// Kind is what a message from the peer was, once Receive checked and
// applied it.
type Kind uint8

const (
	KindData       Kind = iota + 1 // data landed in the rbuf (Rx)
	KindCredit                     // message credit, perhaps with a region (Tx)
	KindIOMap                      // an iomap grant: never announced, ignored as rsocket.c does
	KindShutdown                   // the peer shut down its sending side
	KindDisconnect                 // the peer closed: no more data, and its receives are gone
	KindCtrl                       // another control message (a keepalive's), nothing to do
)

// Errors of a message that breaks the protocol; Rx.OnData and Tx.OnCredit
// have their own.
var (
	ErrDataAfterShutdown = errors.New("rsocket data after shutdown")
	ErrDataLength        = errors.New("rsocket data length does not match the bytes written")
	ErrRegion            = errors.New("rsocket credit with a malformed region")
	ErrReservedOp        = errors.New("rsocket message of a reserved kind")
)

// Receive checks one message from the peer, a write with immediate imm of
// byteLen bytes, and applies it: data to rx, credit to tx (with the region
// the peer granted, read from sgl, this side's target SGL, which was
// announced little-endian: no FlagNet). shut says the peer's stream
// already ended, so that data breaks the protocol. Every value is
// checked: an error means the peer broke the protocol, and the connection
// is to fail. What a Kind says about the stream's end is the caller's.
func Receive(rx *Rx, tx *Tx, sgl []byte, imm, byteLen uint32, shut bool) (Kind, error) {
	data := MsgData(imm)
	switch MsgOp(imm) {
	case OpData:
		if shut {
			return KindData, ErrDataAfterShutdown
		}
		if byteLen != data {
			return KindData, ErrDataLength
		}
		return KindData, rx.OnData(data)
	case OpSGL:
		var e *SGE
		switch byteLen {
		case 0:
		case SGELen:
			s := tx.NextSlot() * SGELen
			g := ParseSGE(sgl[s:s+SGELen], false)
			e = &g
		default:
			return KindCredit, ErrRegion
		}
		return KindCredit, tx.OnCredit(data, e)
	case OpIOMapSGL:
		return KindIOMap, nil
	case OpCtrl:
		switch data {
		case CtrlDisconnect:
			return KindDisconnect, nil
		case CtrlShutdown:
			return KindShutdown, nil
		}
		return KindCtrl, nil
	}
	return 0, ErrReservedOp
}
