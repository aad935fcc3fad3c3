package rsocket

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// receiver is one side's Rx and Tx after the handshake with a peer that
// has 16 receives: a 4 KiB rbuf (2 KiB granted) and a 4 KiB send buffer.
func receiver(t *testing.T) (*Rx, *Tx, []byte) {
	t.Helper()
	peer := ConnData{Version: Version, Credits: 16, TargetSGL: SGE{Addr: 0x1000, Key: 1, Length: SGLSize},
		DataBuf: SGE{Addr: 0x2000, Key: 2, Length: 2048}}
	var rx Rx
	var tx Tx
	rx.Init(4096, 0x10000, 3, 16, peer)
	tx.Init(peer, 64, 4096)
	return &rx, &tx, make([]byte, SGLSize*SGELen)
}

// Receive applies each kind of message and refuses every one that breaks
// the protocol, with no verbs beneath it.
func TestReceive(t *testing.T) {
	grant := func(sgl []byte, slot int, e SGE) { e.Put(sgl[slot*SGELen:(slot+1)*SGELen], false) }
	cases := []struct {
		name    string
		imm     uint32
		byteLen uint32
		shut    bool
		prep    func(sgl []byte, tx *Tx)
		kind    Kind
		err     error // nil: none; errAny: some error
	}{
		{"data", Msg(OpData, 100), 100, false, nil, KindData, nil},
		{"data after shutdown", Msg(OpData, 100), 100, true, nil, KindData, ErrDataAfterShutdown},
		{"data length mismatch", Msg(OpData, 100), 99, false, nil, KindData, ErrDataLength},
		{"empty data", Msg(OpData, 0), 0, false, nil, KindData, errAny},
		{"data beyond the grant", Msg(OpData, 4000), 4000, false, nil, KindData, errAny},
		{"credit", Msg(OpSGL, 16), 0, false, nil, KindCredit, nil},
		{"credit beyond the peer's receives", Msg(OpSGL, 17), 0, false, nil, KindCredit, errAny},
		{"credit with a region", Msg(OpSGL, 16), SGELen, false, func(sgl []byte, tx *Tx) {
			grant(sgl, tx.NextSlot(), SGE{Addr: 0x2800, Key: 2, Length: 2048})
		}, KindCredit, nil},
		{"credit with an empty region", Msg(OpSGL, 20), SGELen, false, nil, KindCredit, errAny},
		{"credit with a malformed region", Msg(OpSGL, 20), SGELen - 1, false, nil, KindCredit, ErrRegion},
		{"iomap", Msg(OpIOMapSGL, 0), 0, false, nil, KindIOMap, nil},
		{"shutdown", Msg(OpCtrl, CtrlShutdown), 0, false, nil, KindShutdown, nil},
		{"disconnect", Msg(OpCtrl, CtrlDisconnect), 0, false, nil, KindDisconnect, nil},
		{"disconnect after shutdown", Msg(OpCtrl, CtrlDisconnect), 0, true, nil, KindDisconnect, nil},
		{"keepalive code", Msg(OpCtrl, CtrlKeepalive), 0, false, nil, KindCtrl, nil},
		{"reserved op 1", Msg(1, 0), 0, false, nil, 0, ErrReservedOp},
		{"write op on the wire", Msg(OpWrite, 0), 0, false, nil, 0, ErrReservedOp},
		{"reserved op 5", Msg(5, 0), 0, false, nil, 0, ErrReservedOp},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rx, tx, sgl := receiver(t)
			if tc.prep != nil {
				tc.prep(sgl, tx)
			}
			kind, err := Receive(rx, tx, sgl, tc.imm, tc.byteLen, tc.shut)
			assert.Equal(t, tc.kind, kind)
			switch tc.err {
			case nil:
				require.NoError(t, err)
			case errAny:
				require.Error(t, err)
			default:
				require.ErrorIs(t, err, tc.err)
			}
		})
	}
}

var errAny = &struct{ error }{}

// What Receive applies is in the windows afterwards: the data is buffered,
// the region granted is the sender's to use.
func TestReceiveApplies(t *testing.T) {
	rx, tx, sgl := receiver(t)
	_, err := Receive(rx, tx, sgl, Msg(OpData, 300), 300, false)
	require.NoError(t, err)
	_, n := rx.Buffered()
	assert.Equal(t, uint64(300), n)

	slot := tx.NextSlot()
	SGE{Addr: 0x2800, Key: 2, Length: 2048}.Put(sgl[slot*SGELen:], false)
	_, err = Receive(rx, tx, sgl, Msg(OpSGL, 16), SGELen, false)
	require.NoError(t, err)
	assert.Equal(t, (slot+1)%SGLSize, tx.NextSlot(), "the grant took its entry of the target SGL")
}

// Checking a message allocates nothing.
func TestReceiveZeroAllocs(t *testing.T) {
	rx, tx, sgl := receiver(t)
	allocs := testing.AllocsPerRun(100, func() {
		_, _ = Receive(rx, tx, sgl, Msg(OpCtrl, CtrlKeepalive), 0, false)
		_, _ = Receive(rx, tx, sgl, Msg(OpSGL, 16), 0, false)
		_, _ = Receive(rx, tx, sgl, Msg(1, 0), 0, false)
	})
	assert.Zero(t, allocs)
}
