package soft

// RawREP is a listener's answer to a connection request picking the given
// transport (bit 0 TCP, bit 1 shared memory, bit 2 TCP now and shared
// memory to follow): what a hostile listener can put on the wire.
func RawREP(transports uint32) []byte {
	m := hsMsg{typ: msgREP, qpn: 1, sqDepth: 4, rqDepth: 4, retry: 7, rnrRetry: 7, transports: transports}
	b, err := m.marshal()
	if err != nil {
		panic(err)
	}
	return b
}

// TransportShmSwitch is the REP's transport "TCP now, shared memory to
// follow".
const TransportShmSwitch = transportShmSwitch

// SwitchMarker is the control header that ends a direction's frames on
// TCP once it moves to shared memory.
func SwitchMarker() []byte {
	var h [hdrLen]byte
	h[0], h[1] = frameShmSwitch, shmMarker
	return h[:]
}
