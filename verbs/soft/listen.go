package soft

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/rdmanet/rdma/internal/phase"
	"github.com/rdmanet/rdma/verbs"
)

// The passive side of the connection manager's handshake: a listening ID
// accepts TCP connections at its address (admission.go decides which get a
// handshake slot and when), reads each one's REQ within the handshake
// timeout, reports it as a connect request, and answers it by Accept (REP)
// or Reject (REJ) on the child ID. The active side is connect.go.

func (id *cmID) Listen(backlog int) error {
	const op = "rdma_listen"
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.destroyed {
		return verbs.ErrClosed
	}
	if id.state == idIdle {
		// As rdma_listen does: an unbound ID is bound to the wildcard
		// address and a free port first.
		id.local = &net.TCPAddr{IP: net.IPv4zero}
		id.ctx = cmContext
		id.state = idBound
	}
	if id.state != idBound {
		return verbs.Errorf(op, syscall.EINVAL, "ID is already listening or connecting")
	}
	// Go's TCP keepalive off, as on the dialing side (dialTCP).
	nl, err := (&net.ListenConfig{KeepAlive: -1}).Listen(context.Background(), "tcp", id.local.String())
	if err != nil {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			errno = syscall.EADDRINUSE
		}
		return verbs.Errorf(op, errno, "%v", err)
	}
	ln := nl.(*net.TCPListener)
	id.ln = ln
	id.local = copyAddr(ln.Addr().(*net.TCPAddr))
	if backlog <= 0 {
		backlog = defaultBacklog
	}
	id.backlog = backlog
	hsTimeout := time.Duration(handshakeTimeout.Load())
	// A connection's handshake starts once it has a waiting place
	// (admission.go): at once, or when one frees up. Whoever gives it
	// the place is one of the ID's goroutines (the accept loop, or a
	// handshake that ends), so that Destroy waits for it too.
	id.slots = newAdmission(max(1, int(maxHandshakes.Load())), max(1, int(maxHandshakesPerHost.Load())),
		func(slot *hsSlot) {
			id.wg.Add(1)
			go id.handshake(slot.c, hsTimeout, slot)
		})
	id.state = idListening
	id.wg.Add(1)
	go id.acceptLoop(ln)
	return nil
}

func (id *cmID) acceptLoop(ln *net.TCPListener) {
	defer id.wg.Done()
	defer id.slots.shut()
	for {
		c, err := ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of fds and the like: back off briefly, keep serving.
			select {
			case <-id.life.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		phase.Mark("soft listen: TCP accepted")
		id.slots.arrive(c) // never waits: one host's connections must not hold up the others'
	}
}

// readHandshake reads one handshake message from tr.
func readHandshake(tr *tcpTransport) (hsMsg, error) {
	var hb [hsHdrLen]byte
	if err := tr.readPayload(hb[:], gateRef{}); err != nil {
		return hsMsg{}, err
	}
	_, n, err := parseHandshakeHeader(hb[:])
	if err != nil {
		return hsMsg{}, err
	}
	b := make([]byte, hsHdrLen+n)
	copy(b, hb[:])
	if err := tr.readPayload(b[hsHdrLen:], gateRef{}); err != nil {
		return hsMsg{}, err
	}
	return parseHandshake(b)
}

// handshake reads a connection request on a freshly accepted connection
// and turns it into EventConnectRequest. Anything else is dropped.
func (id *cmID) handshake(c *net.TCPConn, hsTimeout time.Duration, slot *hsSlot) {
	defer id.wg.Done()
	phase.Mark("soft listen: handshake running")
	// The slot (or the place in the waiting list) goes back at the latest
	// on return; sooner once the request can be answered, below.
	release := func() { id.slots.release(slot) }
	defer release()
	tr, err := newTCPTransport(c)
	if err != nil {
		c.Close()
		return
	}
	deadline := time.Now().Add(hsTimeout)
	// A connection that has waited silentAfter without its request gives
	// its place up then to a parked one, if there is one that could take
	// it (admission.go); else it waits on, to the deadline.
	giveWay := time.Now().Add(id.slots.silentAfter)
	_ = tr.setReadDeadline(giveWay)
	if deadline.Before(giveWay) {
		_ = tr.setReadDeadline(deadline)
	}
	// Destroying the listener ends handshakes in progress.
	stopped := make(chan struct{})
	stop := context.AfterFunc(id.life, func() {
		close(stopped) // first: a deadline set after this sees it
		_ = tr.setReadDeadline(time.Unix(1, 0))
	})
	// A slot only once the request is there (admission.go).
	err = awaitRequest(tr)
	again := errors.Is(err, os.ErrDeadlineExceeded) && giveWay.Before(deadline)
	if again && id.slots.giveWay(slot) {
		c.Close()
		stop()
		return
	}
	// The handshake's deadline from now on (the read below has it too),
	// unless the listener's end came meanwhile.
	_ = tr.setReadDeadline(deadline)
	select {
	case <-stopped:
		_ = tr.setReadDeadline(time.Unix(1, 0))
	default:
	}
	if again {
		err = awaitRequest(tr)
	}
	ok := err == nil && id.slots.awaitSlot(id.life, slot, deadline)
	var m hsMsg
	if ok {
		m, err = readHandshake(tr)
	}
	stop()
	if !ok || err != nil || m.typ != msgREQ {
		c.Close()
		return
	}
	phase.Mark("soft listen: REQ read")
	_ = tr.setReadDeadline(time.Time{})
	shmDeadline := time.Now().Add(hsTimeout)
	child := newCMID(nil)
	child.state, child.parent, child.tr, child.req, child.ctx = idConnectRequest, id, tr, m, cmContext
	// Accept's bound on the REP's write and the wait for the RTU (10 s by
	// default).
	child.timeout = 2 * hsTimeout
	child.local, child.remote = copyAddr(c.LocalAddr().(*net.TCPAddr)), copyAddr(c.RemoteAddr().(*net.TCPAddr))
	switch {
	case shmSwitchOffered(&m, c):
		// Answered "TCP now, shared memory to follow": the exchange
		// runs when the connection asks for it (shm_switch_linux.go).
		child.shmX = newShmExchange()
		counters.shmAccepted.Add(1)
	case m.transports&transportShm != 0:
		child.shmDone = make(chan struct{})
	}
	// Setting up shared memory (a local exchange, at most shmSetupTimeout) still
	// holds the handshake slot, so that requests naming slow sockets are
	// bounded like slow requests.
	if !id.awaitBacklog(shmDeadline) {
		c.Close()
		return
	}
	id.pending++
	child.ch = id.ch
	ch := id.ch
	id.mu.Unlock()
	if m.transports&reqTakesMRA != 0 {
		// The request is about to reach the consumer, which may hold it:
		// tell the connecting side, so that it waits for the answer.
		mra, _ := (&hsMsg{typ: msgMRA}).marshal()
		_ = c.SetWriteDeadline(time.Now().Add(hsTimeout))
		_, err := c.Write(mra)
		_ = c.SetWriteDeadline(time.Time{})
		if err != nil {
			id.mu.Lock()
			id.unpend()
			id.mu.Unlock()
			c.Close()
			return
		}
	}
	phase.Mark("soft listen: request reported")
	if child.shmDone == nil {
		// Free before the request can be answered: a client that dials
		// again as soon as it is connected finds the slot free.
		release()
	}
	ch.push(verbs.CMEvent{Type: verbs.EventConnectRequest, ID: child, Listen: id, Param: verbs.ConnParam{
		PrivateData:        padPrivateData(m.priv, verbs.MaxPrivateDataConnect),
		ResponderResources: int(m.respRes),
		InitiatorDepth:     int(m.initDepth),
		RetryCount:         int(m.retry),
		RNRRetryCount:      int(m.rnrRetry),
	}})
	if child.shmDone != nil {
		// The ring exchange overlaps the consumer's setup (its QP and
		// memory) instead of coming before the request is reported.
		shm := shmAnswer(&m, c, shmDeadline)
		if shm != nil {
			counters.shmAccepted.Add(1)
		} else {
			counters.shmRefused.Add(1)
		}
		child.mu.Lock()
		if child.destroyed || child.state != idConnectRequest {
			shm.abort() // rejected or destroyed meanwhile
		} else {
			child.shm = shm
		}
		child.mu.Unlock()
		release()
		close(child.shmDone)
	}
}

func (id *cmID) Accept(param *verbs.ConnParam) error {
	const op = "rdma_accept"
	if param == nil {
		param = &verbs.ConnParam{}
	}
	if err := checkParam(op, param, verbs.MaxPrivateDataAccept); err != nil {
		return err
	}
	if id.shmDone != nil {
		// The offer's answer, at most shmSetupTimeout away; set with the
		// request, never changed.
		<-id.shmDone
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	q, err := id.openingQP(op, idConnectRequest, "no connection request to accept")
	if err != nil {
		return err
	}
	if id.ackTimeoutSet {
		q.mu.Lock()
		q.attr.Timeout = id.ackTimeout
		q.mu.Unlock()
	}
	rep := hsMsg{typ: msgREP, qpn: q.num, sqDepth: uint32(q.cap.MaxSendWR), rqDepth: uint32(q.cap.MaxRecvWR),
		respRes: uint8(param.ResponderResources), initDepth: uint8(param.InitiatorDepth),
		retry: uint8(param.RetryCount), rnrRetry: uint8(param.RNRRetryCount),
		transports: transportTCP, delayedAcks: id.req.delayedAcks, priv: param.PrivateData}
	if id.shm != nil {
		rep.transports = transportShm
	} else if id.shmX != nil {
		rep.transports = transportShmSwitch
	}
	b, err := rep.marshal()
	if err != nil {
		return verbs.Errorf(op, syscall.EINVAL, "%v", err)
	}
	c := id.tr.c
	_ = c.SetWriteDeadline(time.Now().Add(id.timeout))
	if _, err := c.Write(b); err != nil {
		return verbs.Errorf(op, syscall.ECONNRESET, "%v", err)
	}
	_ = c.SetWriteDeadline(time.Time{})
	phase.Mark("soft accept: REP sent")
	id.releasePending()
	id.state = idAccepting
	tr := id.tr
	id.tr = nil
	req := id.req
	rtuWait := id.timeout
	var etr transport = tr
	if id.shm != nil {
		// The RTU still comes on TCP (read below); frames go through
		// shared memory.
		st, err := id.shm.start(tr.c)
		id.shm = nil
		if err != nil {
			_ = tr.close()
			return verbs.Errorf(op, syscall.ECONNRESET, "%v", err)
		}
		etr = st
	} else if id.shmX != nil {
		// Frames start on TCP now, and move to the rings once the
		// active side invites this side to its exchange, and it is
		// through.
		etr = newSwitchPassive(tr, &req, id.shmX)
		id.shmX = nil
	}
	q.mu.Lock()
	q.sock = tr.c
	q.mu.Unlock()
	q.start(etr, &req, id.engineDown)
	q.mu.Lock()
	q.attr.RetryCnt = int(req.retry)
	q.attr.RNRRetry = int(req.rnrRetry)
	if param.ResponderResources > 0 {
		q.attr.MaxDestRdAtomic = param.ResponderResources
	}
	if param.InitiatorDepth > 0 {
		q.attr.MaxRdAtomic = min(param.InitiatorDepth, max(int(req.respRes), 1))
	}
	if q.state == verbs.QPSInit {
		q.setState(verbs.QPSRTR)
		q.setState(verbs.QPSRTS)
	}
	q.mu.Unlock()
	q.startReceiver(func() error {
		_ = tr.setReadDeadline(time.Now().Add(rtuWait))
		m, err := readHandshake(tr)
		if err != nil {
			return err
		}
		if m.typ != msgRTU {
			return errBadHandshake
		}
		phase.Mark("soft accept: RTU read")
		_ = tr.setReadDeadline(time.Time{})
		id.mu.Lock()
		ok := id.state == idAccepting
		if ok {
			id.connectedLocked()
		}
		id.mu.Unlock()
		if ok {
			id.established(verbs.ConnParam{})
		}
		return nil
	})
	return nil
}

// awaitBacklog waits until the listener's backlog has room, as the kernel's
// connection manager has a request retried rather than refused: true, with
// id.mu held, once it has; false if the deadline passes or the listener is
// destroyed first. A request reported waits in the backlog until the
// consumer accepts or rejects it.
func (id *cmID) awaitBacklog(deadline time.Time) bool {
	var w waiter
	defer w.stop()
	for {
		id.mu.Lock()
		if id.destroyed {
			id.mu.Unlock()
			return false
		}
		if id.pending < id.backlog {
			return true
		}
		if id.backlogFreed == nil {
			id.backlogFreed = make(chan struct{})
		}
		freed := id.backlogFreed
		id.mu.Unlock()
		if !w.wait(id.life, freed, deadline) {
			return false
		}
	}
}

// releasePending frees the listener's backlog entry. Called with id.mu held.
func (id *cmID) releasePending() {
	if p := id.parent; p != nil && id.state == idConnectRequest {
		p.mu.Lock()
		p.unpend()
		p.mu.Unlock()
	}
}

// unpend frees a backlog entry of the listening id. Called with id.mu held.
func (id *cmID) unpend() {
	id.pending--
	if id.backlogFreed != nil {
		close(id.backlogFreed)
		id.backlogFreed = nil
	}
}

func (id *cmID) Reject(privateData []byte) error {
	const op = "rdma_reject"
	if len(privateData) > verbs.MaxPrivateDataReject {
		return verbs.Errorf(op, syscall.EINVAL, "%d bytes of private data, at most %d", len(privateData), verbs.MaxPrivateDataReject)
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if err := id.inState(op, idConnectRequest, "no connection request to reject"); err != nil {
		return err
	}
	b, _ := (&hsMsg{typ: msgREJ, priv: privateData}).marshal()
	c := id.tr.c
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, err := c.Write(b)
	c.Close()
	id.shm.abort()
	id.shm = nil
	id.shmX.drop()
	id.shmX = nil
	id.releasePending()
	id.state = idDone
	id.tr = nil
	if err != nil {
		return verbs.Errorf(op, syscall.ECONNRESET, "%v", err)
	}
	return nil
}
