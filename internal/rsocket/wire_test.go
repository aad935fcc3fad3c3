package rsocket

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// connDataGolden is struct rs_conn_data as rsocket.c's rs_format_conn_data
// fills it on a little-endian host with the defaults (rq_size 384, rbuf
// 128 KiB: first region 64 KiB): every field big-endian.
var connDataGolden = mustHex("01" + "02" + "0180" + "000000" + "00" +
	"00007f0012345678" + "0000abcd" + "00000002" +
	"00007f00aaaa0000" + "00001234" + "00010000")

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func TestConnDataGolden(t *testing.T) {
	c := ConnData{
		Version:   Version,
		Flags:     FlagIOMap,
		Credits:   384,
		TargetSGL: SGE{Addr: 0x7f0012345678, Key: 0xabcd, Length: SGLSize},
		DataBuf:   SGE{Addr: 0x7f00aaaa0000, Key: 0x1234, Length: 64 << 10},
	}
	b := make([]byte, ConnDataLen)
	c.Marshal(b)
	require.Equal(t, connDataGolden, b)

	// The connection manager pads private data with zeros: accepted.
	got, err := ParseConnData(append(bytes.Clone(connDataGolden), make([]byte, 16)...))
	require.NoError(t, err)
	require.Equal(t, c, got)
	require.False(t, got.BigEndianSGL())
	got.Flags |= FlagNet
	require.True(t, got.BigEndianSGL())
}

func TestParseConnDataRejects(t *testing.T) {
	mod := func(f func(b []byte)) []byte {
		b := bytes.Clone(connDataGolden)
		f(b)
		return b
	}
	for name, b := range map[string][]byte{
		"empty":        nil,
		"short":        connDataGolden[:ConnDataLen-1],
		"version 0":    mod(func(b []byte) { b[0] = 0 }),
		"version 2":    mod(func(b []byte) { b[0] = 2 }),
		"no credits":   mod(func(b []byte) { b[2], b[3] = 0, 0 }),
		"SGL of 0":     mod(func(b []byte) { copy(b[20:24], []byte{0, 0, 0, 0}) }),
		"SGL too long": mod(func(b []byte) { copy(b[20:24], []byte{0, 0, 1, 0}) }),
		"no buffer":    mod(func(b []byte) { copy(b[36:40], []byte{0, 0, 0, 0}) }),
		"buffer > max": mod(func(b []byte) { copy(b[36:40], []byte{0x40, 0, 0, 1}) }),
		"SGL wraps":    mod(func(b []byte) { copy(b[8:16], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xf0}) }),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseConnData(b)
			require.Error(t, err)
			require.True(t, errors.Is(err, ErrConnData), "%v", err)
		})
	}
}

func TestSGEByteOrder(t *testing.T) {
	s := SGE{Addr: 0x0102030405060708, Key: 0x090a0b0c, Length: 0x0d0e0f10}
	b := make([]byte, SGELen)
	s.Put(b, true)
	require.Equal(t, mustHex("0102030405060708090a0b0c0d0e0f10"), b)
	require.Equal(t, s, ParseSGE(b, true))
	s.Put(b, false)
	require.Equal(t, mustHex("0807060504030201"+"0c0b0a09"+"100f0e0d"), b)
	require.Equal(t, s, ParseSGE(b, false))
}

func TestMsgEncoding(t *testing.T) {
	// rs_msg_set(op, data) = op<<29 | data; the verbs layer puts it on the
	// wire big-endian (htobe32 in rsocket.c).
	require.Equal(t, uint32(0x00010000), Msg(OpData, 64<<10))
	require.Equal(t, uint32(0x80000180), Msg(OpSGL, 384))
	require.Equal(t, uint32(0xe0000000), Msg(OpCtrl, CtrlDisconnect))
	require.Equal(t, uint32(0xe0000001), Msg(OpCtrl, CtrlKeepalive))
	require.Equal(t, uint32(0xe0000002), Msg(OpCtrl, CtrlShutdown))
	require.Equal(t, uint32(OpSGL), MsgOp(0x80000180))
	require.Equal(t, uint32(384), MsgData(0x80000180))
	require.Equal(t, uint32(0x1fffffff), MsgData(Msg(OpData, 0xffffffff)), "data is 29 bits")
}
