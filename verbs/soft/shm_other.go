//go:build !linux

package soft

import (
	"net"
	"time"
)

// Shared memory needs memfds, eventfds and descriptor passing: on this
// platform connections always use TCP. These stand-ins keep the CM's code
// the same on every platform.

type shmOffer struct{ version uint8 }

func newShmOffer(*net.TCPConn, time.Time) *shmOffer          { return nil }
func (o *shmOffer) extension() []byte                        { return nil }
func (o *shmOffer) abort()                                   {}
func (o *shmOffer) finish(*net.TCPConn) (transport, error)   { return nil, errBadHandshake }
func shmAnswer(*hsMsg, *net.TCPConn, time.Time) *shmPrepared { return nil }
func (p *shmPrepared) abort()                                {}
func (p *shmPrepared) start(*net.TCPConn) (transport, error) { return nil, errBadHandshake }

type shmPrepared struct{}

type shmExchange struct{}

func (x *shmExchange) drop()                                                {}
func (o *shmOffer) switching(*tcpTransport) transport                       { return nil }
func shmSwitchOffered(*hsMsg, *net.TCPConn) bool                            { return false }
func newShmExchange() *shmExchange                                          { return nil }
func newSwitchPassive(tr *tcpTransport, _ *hsMsg, _ *shmExchange) transport { return tr }
