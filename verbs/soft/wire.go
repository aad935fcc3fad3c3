package soft

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Frames: every message between two connected QPs is a fixed 32-byte header
// followed by Len payload bytes (none for READ_REQ, ACK, NAK and DISC).
//
//	off size field
//	0   1    type (frame*)
//	1   1    flags (flag*)
//	2   2    reserved, zero
//	4   4    PSN: the request's sequence number (responses: the request's)
//	8   4    ACK: with flagAck, every request with PSN < ACK has executed
//	12  4    Len: payload length (READ_REQ: the length asked for)
//	16  4    Imm (SEND/WRITE_WITH_IMM), NAK syndrome (NAK)
//	20  4    RKey (WRITE*, READ_REQ)
//	24  8    remote address (WRITE*, READ_REQ)
//
// Integers are little-endian: both ends are this package.
const hdrLen = 32

const (
	frameSend     = 1
	frameSendImm  = 2
	frameWrite    = 3
	frameWriteImm = 4
	frameReadReq  = 5
	frameReadResp = 6
	frameAck      = 7
	frameNak      = 8
	frameDisc     = 9
	frameMax      = frameDisc
)

const (
	flagSolicited = 1 << 0
	flagAck       = 1 << 1
	// flagAckReq asks the peer's responder to acknowledge promptly, rather
	// than let the ACK wait for a frame of its own to ride on (delayed
	// ACKs: responder.go). A requester sets it only towards a peer that
	// agreed to delayed ACKs in the handshake (hsDelayedAcks), which also
	// says that the peer decodes it: a peer of an earlier version rejects
	// the frame.
	flagAckReq = 1 << 2
	flagsValid = flagSolicited | flagAck | flagAckReq
)

// NAK syndromes (carried in Imm). The low byte of an RNR NAK's Imm is the
// responder's min RNR timer, as in IB's AETH.
const (
	nakRNR       = 1 << 8
	nakRemAccess = 2 << 8
	nakInvReq    = 3 << 8
	nakRemOp     = 4 << 8
)

// header is a decoded frame header.
type header struct {
	typ   uint8
	flags uint8
	psn   uint32
	ack   uint32
	len   uint32
	imm   uint32
	rkey  uint32
	raddr uint64
}

func (h *header) encode(b *[hdrLen]byte) {
	b[0] = h.typ
	b[1] = h.flags
	b[2], b[3] = 0, 0
	binary.LittleEndian.PutUint32(b[4:], h.psn)
	binary.LittleEndian.PutUint32(b[8:], h.ack)
	binary.LittleEndian.PutUint32(b[12:], h.len)
	binary.LittleEndian.PutUint32(b[16:], h.imm)
	binary.LittleEndian.PutUint32(b[20:], h.rkey)
	binary.LittleEndian.PutUint64(b[24:], h.raddr)
}

var errBadFrame = errors.New("soft: malformed frame header")

// decode parses and validates a header read off the network.
func (h *header) decode(b *[hdrLen]byte) error {
	h.typ = b[0]
	h.flags = b[1]
	h.psn = binary.LittleEndian.Uint32(b[4:])
	h.ack = binary.LittleEndian.Uint32(b[8:])
	h.len = binary.LittleEndian.Uint32(b[12:])
	h.imm = binary.LittleEndian.Uint32(b[16:])
	h.rkey = binary.LittleEndian.Uint32(b[20:])
	h.raddr = binary.LittleEndian.Uint64(b[24:])
	if h.typ == 0 || h.typ > frameMax || h.flags&^flagsValid != 0 || b[2] != 0 || b[3] != 0 {
		return errBadFrame
	}
	if h.len > maxMsgSize {
		return errBadFrame
	}
	switch h.typ {
	case frameAck, frameNak, frameDisc:
		if h.len != 0 {
			return errBadFrame
		}
	}
	return nil
}

// payloadLen is how many bytes follow the header on the wire.
func (h *header) payloadLen() int {
	switch h.typ {
	case frameSend, frameSendImm, frameWrite, frameWriteImm, frameReadResp:
		return int(h.len)
	}
	return 0
}

// Handshake messages travel on the TCP connection before frames start:
// the active side sends REQ, the passive side answers REP or REJ, the
// active side confirms a REP with RTU (IB CM's REQ/REP/REJ/RTU). As the
// kernel's RDMA CM does with an MRA, a passive side tells an active side
// that offered reqTakesMRA that the request reached its consumer, which
// holds it: the active side then waits for the REP or REJ as long as the
// kernel's CM does (heldRequestTimeout) instead of timing the connect out.
//
//	off size field
//	0   4    magic "SRDM"
//	4   1    version (1)
//	5   1    type (msg*)
//	6   2    body length (<= maxHandshakeBody)
//	8   ...  body
//
// REQ/REP body: qpn u32, sq depth u32, rq depth u32, responder resources u8,
// initiator depth u8, retry count u8, rnr retry count u8, transports u32
// (a bit set of ways to carry frames: the REQ offers, the REP picks one;
// bit 0 is this TCP connection), private data length u8, private data,
// extension length u16, extension bytes (for the chosen transport's setup).
// REJ body: private data length u8, private data. RTU and MRA bodies:
// empty. Beside the transports, a REQ's and a REP's set may hold
// hsDelayedAcks.
const (
	hsMagic          = "SRDM"
	hsVersion        = 1
	hsHdrLen         = 8
	maxHandshakeBody = 1024
	maxExtLen        = 512
)

const (
	msgREQ = 1
	msgREP = 2
	msgREJ = 3
	msgRTU = 4
	msgMRA = 5 // at most one, before the REP or REJ
)

const transportTCP = 1 << 0

// reqTakesMRA is a flag in a REQ's transports, beside the transports it
// offers (a passive side that does not know it ignores it): the active
// side understands msgMRA. A REP's transports hold exactly one transport.
const reqTakesMRA = 1 << 31

// hsDelayedAcks is a flag in a REQ's transports (the active side delays
// its ACKs and honours flagAckReq) and in the REP that answers such a REQ
// (the passive side does too): with it on both, each side's responder
// delays its ACKs and each side's requester asks for the prompt ones it
// needs. A passive side that does not know it ignores it, and its REP,
// without it, keeps the connection on immediate ACKs; a passive side
// sets it in a REP only when the REQ had it, so that an active side that
// does not know it never sees it. parseHandshake takes it out of
// transports into hsMsg.delayedAcks.
const hsDelayedAcks = 1 << 30

// hsMsg is a decoded handshake message.
type hsMsg struct {
	typ        uint8
	qpn        uint32
	sqDepth    uint32
	rqDepth    uint32
	respRes    uint8
	initDepth  uint8
	retry      uint8
	rnrRetry   uint8
	transports uint32
	// delayedAcks: the sender delays ACKs and honours flagAckReq
	// (hsDelayedAcks, carried in the transports word).
	delayedAcks bool
	priv        []byte
	ext         []byte
}

func (m *hsMsg) privLimit() int {
	switch m.typ {
	case msgREQ:
		return 56
	case msgREP:
		return 196
	case msgREJ:
		return 148
	}
	return 0
}

// marshal encodes m; it fails when a field is out of range.
func (m *hsMsg) marshal() ([]byte, error) {
	if len(m.priv) > m.privLimit() {
		return nil, fmt.Errorf("soft: private data of %d bytes above %d", len(m.priv), m.privLimit())
	}
	if len(m.ext) > maxExtLen {
		return nil, fmt.Errorf("soft: handshake extension of %d bytes above %d", len(m.ext), maxExtLen)
	}
	b := make([]byte, hsHdrLen, hsHdrLen+64+len(m.priv)+len(m.ext))
	copy(b, hsMagic)
	b[4] = hsVersion
	b[5] = m.typ
	switch m.typ {
	case msgREQ, msgREP:
		b = binary.LittleEndian.AppendUint32(b, m.qpn)
		b = binary.LittleEndian.AppendUint32(b, m.sqDepth)
		b = binary.LittleEndian.AppendUint32(b, m.rqDepth)
		b = append(b, m.respRes, m.initDepth, m.retry, m.rnrRetry)
		tr := m.transports
		if m.delayedAcks {
			tr |= hsDelayedAcks
		}
		b = binary.LittleEndian.AppendUint32(b, tr)
		b = append(b, byte(len(m.priv)))
		b = append(b, m.priv...)
		b = binary.LittleEndian.AppendUint16(b, uint16(len(m.ext)))
		b = append(b, m.ext...)
	case msgREJ:
		b = append(b, byte(len(m.priv)))
		b = append(b, m.priv...)
	case msgRTU, msgMRA:
	default:
		return nil, fmt.Errorf("soft: unknown handshake message type %d", m.typ)
	}
	binary.LittleEndian.PutUint16(b[6:], uint16(len(b)-hsHdrLen))
	return b, nil
}

var errBadHandshake = errors.New("soft: malformed handshake")

// parseHandshakeHeader checks the fixed part and returns type and body length.
func parseHandshakeHeader(b []byte) (typ uint8, bodyLen int, err error) {
	if len(b) < hsHdrLen || string(b[:4]) != hsMagic || b[4] != hsVersion {
		return 0, 0, errBadHandshake
	}
	typ = b[5]
	if typ < msgREQ || typ > msgMRA {
		return 0, 0, errBadHandshake
	}
	n := int(binary.LittleEndian.Uint16(b[6:]))
	if n > maxHandshakeBody {
		return 0, 0, errBadHandshake
	}
	return typ, n, nil
}

// parseHandshake decodes a whole message (header and body) read off the
// network. The returned slices alias b.
func parseHandshake(b []byte) (hsMsg, error) {
	var m hsMsg
	typ, n, err := parseHandshakeHeader(b)
	if err != nil {
		return m, err
	}
	if len(b) != hsHdrLen+n {
		return m, errBadHandshake
	}
	m.typ = typ
	body := b[hsHdrLen:]
	switch typ {
	case msgREQ, msgREP:
		if len(body) < 21 {
			return m, errBadHandshake
		}
		m.qpn = binary.LittleEndian.Uint32(body)
		m.sqDepth = binary.LittleEndian.Uint32(body[4:])
		m.rqDepth = binary.LittleEndian.Uint32(body[8:])
		m.respRes, m.initDepth, m.retry, m.rnrRetry = body[12], body[13], body[14], body[15]
		m.transports = binary.LittleEndian.Uint32(body[16:])
		m.delayedAcks = m.transports&hsDelayedAcks != 0
		m.transports &^= hsDelayedAcks
		pl := int(body[20])
		body = body[21:]
		if pl > m.privLimit() || len(body) < pl+2 {
			return m, errBadHandshake
		}
		m.priv = body[:pl:pl]
		body = body[pl:]
		el := int(binary.LittleEndian.Uint16(body))
		body = body[2:]
		if el > maxExtLen || len(body) != el {
			return m, errBadHandshake
		}
		m.ext = body[:el:el]
		if m.qpn == 0 || m.qpn > 0xffffff || m.sqDepth == 0 || m.sqDepth > maxQPWR || m.rqDepth > maxQPWR ||
			m.retry > 7 || m.rnrRetry > 7 || m.respRes > maxRdAtom || m.initDepth > maxRdAtom {
			return m, errBadHandshake
		}
		if typ == msgREP && m.transports&(m.transports-1) != 0 {
			return m, errBadHandshake // a REP picks exactly one transport
		}
		if m.transports&^reqTakesMRA == 0 {
			return m, errBadHandshake // nothing to carry frames
		}
	case msgREJ:
		if len(body) < 1 {
			return m, errBadHandshake
		}
		pl := int(body[0])
		if pl > m.privLimit() || len(body) != 1+pl {
			return m, errBadHandshake
		}
		m.priv = body[1 : 1+pl : 1+pl]
	case msgRTU, msgMRA:
		if len(body) != 0 {
			return m, errBadHandshake
		}
	}
	return m, nil
}

// The shared-memory offer: the extension of a REQ that offers
// transportShm (shm.go). Versions 3 and 4:
//
//	off size field
//	0   4    magic "SHM3" or "SHM4"
//	4   36   boot ID of the offering host (/proc/sys/kernel/random/boot_id)
//	40  16   token: the passive side presents it on the unix socket, which
//	         proves that it read this REQ
//	56  4    ring size: the data size of the offering side's ring, also the
//	         largest ring it maps (a power of two, shmRingMin..shmRingMax)
//
// On the unix socket the passive side then sends its token and its ring
// setup in one message, its ring as large as the offering side's, and the
// active side answers with its own setup: one round trip. Version 2
// ("SHM2", the first 56 bytes above) takes one and a half: the token
// alone, the active side's setup, then the passive side's, sized to the
// one received.
//
// Versions 2 and 3 are answered before the connection starts: a REP that
// picks transportShm carries the frames on the rings from the first.
// Version 4 has the same exchange, but off the connection's path: the REP
// picks transportShmSwitch (the frames start on this TCP connection).
// Once the connection has carried SetSharedMemorySwitch's bytes (or its
// active side received SetSharedMemorySwitchFrames' frames), the active
// side opens its socket and invites the passive side with a
// control header on TCP (type frameShmSwitch, byte 1 shmInvite, all else
// zero); each side, once its own exchange is through, switches its sending
// direction to the rings at a frame boundary with a switch marker (byte 1
// shmMarker), the last thing it sends on TCP. The receiving side reads its
// own ring from the marker on. A
// listener answers every version; a dialler offers version 4, which a
// listener that does not know it does not parse: that connection stays on
// TCP.
//
// Nothing else: in particular no socket name, which each side derives from
// the TCP connection's addresses as its own kernel reports them.
const (
	shmOfferMagic   = "SHM3"
	shmOfferMagicV4 = "SHM4"
	shmOfferLen     = 60
	shmOfferMagicV2 = "SHM2"
	shmOfferLenV2   = 56
	bootIDLen       = 36
)

// transportShmSwitch is what a REP picks for a version 4 offer: frames
// start on TCP and each direction moves to shared memory once set up.
const transportShmSwitch = 1 << 2

// frameShmSwitch is the type of the switch control headers on TCP: the
// invitation, and the marker that ends a direction's frames there (the
// switching transport consumes them; the engine never sees them, and
// rejects them as an unknown type if they ever came where no switch can
// happen).
const frameShmSwitch = frameMax + 1

// Control header kinds (byte 1 of a frameShmSwitch header).
const (
	shmMarker = 0
	shmInvite = 1
)

type shmOfferExt struct {
	version  uint8 // 2, 3 or 4 (marshal: anything else is 3)
	bootID   string
	token    [16]byte
	ringSize uint32 // versions 3 and 4
}

func (o *shmOfferExt) marshal() []byte {
	b := make([]byte, 0, shmOfferLen)
	switch o.version {
	case 2:
		b = append(b, shmOfferMagicV2...)
	case 4:
		b = append(b, shmOfferMagicV4...)
	default:
		b = append(b, shmOfferMagic...)
	}
	b = append(b, o.bootID...)
	b = append(b, o.token[:]...)
	if o.version == 2 {
		return b
	}
	return binary.LittleEndian.AppendUint32(b, o.ringSize)
}

// parseShmOffer decodes a REQ's shared-memory offer, of any version.
func parseShmOffer(b []byte) (shmOfferExt, error) {
	var o shmOfferExt
	switch {
	case len(b) == shmOfferLen && (string(b[:4]) == shmOfferMagic || string(b[:4]) == shmOfferMagicV4):
		o.version = 3
		if string(b[:4]) == shmOfferMagicV4 {
			o.version = 4
		}
		o.ringSize = binary.LittleEndian.Uint32(b[shmOfferLenV2:])
		if o.ringSize < shmRingMin || o.ringSize > shmRingMax || o.ringSize&(o.ringSize-1) != 0 {
			return shmOfferExt{}, errBadHandshake
		}
	case len(b) == shmOfferLenV2 && string(b[:4]) == shmOfferMagicV2:
		o.version = 2
	default:
		return o, errBadHandshake
	}
	o.bootID = string(b[4 : 4+bootIDLen])
	copy(o.token[:], b[4+bootIDLen:shmOfferLenV2])
	return o, nil
}

// isShmSwitch reports whether h is a well-formed switch control header:
// type frameShmSwitch, byte 1 its kind (shmMarker or shmInvite), all else
// zero.
func isShmSwitch(h *[hdrLen]byte) bool {
	if h[0] != frameShmSwitch || h[1] > shmInvite {
		return false
	}
	for _, c := range h[2:] {
		if c != 0 {
			return false
		}
	}
	return true
}

// The ring setup, one message on the unix socket in each direction (in
// version 3 the passive side's follows its 16-byte token in the same
// message), with two descriptors (the ring's memfd, then the eventfd its
// reader sleeps on):
//
//	off size field
//	0   4    magic "SRNG"
//	4   4    ring data size: a power of two, shmRingMin..the reader's limit
//	8   8    zero
const (
	shmSetupMagic = "SRNG"
	shmSetupLen   = 16
)

func marshalShmSetup(b *[shmSetupLen]byte, size uint32) {
	*b = [shmSetupLen]byte{}
	copy(b[:], shmSetupMagic)
	binary.LittleEndian.PutUint32(b[4:], size)
}

// parseShmSetup decodes a ring setup and checks its size against limit,
// the largest ring this side maps.
func parseShmSetup(b []byte, limit uint32) (uint32, error) {
	if len(b) != shmSetupLen || string(b[:4]) != shmSetupMagic || binary.LittleEndian.Uint64(b[8:]) != 0 {
		return 0, errBadHandshake
	}
	size := binary.LittleEndian.Uint32(b[4:])
	if size < shmRingMin || size > limit || size&(size-1) != 0 {
		return 0, errBadHandshake
	}
	return size, nil
}
