package soft

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/rdmanet/rdma/verbs/verbstest"
)

// BenchmarkTCPPingPongFloor is the floor under soft's TCP path with many
// connections: 64-byte ping-pongs on P pairs at once over Go's TCP on
// loopback, one socket per pair (Go's TCP, what rdmaperf's baseline
// does, and the shape of soft's TCP path, a socket per QP), against every
// pair's messages on one socket, read by a goroutine per side that hands
// each message to its pair's goroutine (a multiplexed TCP path, not
// built), with the writes made by each sender ("mux") or gathered by a
// writer goroutine into one write ("mux-gathered"). cpu-ns/op is the
// process's CPU per round trip, both ends included. A multiplexed path
// would have to beat the per-socket shape by more than soft's emulation
// costs (2-3 us a round trip) to pass Go's TCP.
//
//	go test -run '^$' -bench TCPPingPongFloor -benchtime 2s -count 3 ./verbs/soft
func BenchmarkTCPPingPongFloor(b *testing.B) {
	for _, pairs := range []int{8, 64} {
		for _, shape := range []string{"socket-per-pair", "mux", "mux-gathered"} {
			b.Run(fmt.Sprintf("pairs=%d/%s", pairs, shape), func(b *testing.B) {
				floorPingPong(b, pairs, shape)
			})
		}
	}
}

const floorMsg = 64

func floorPingPong(b *testing.B, pairs int, shape string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	sockets := pairs
	if shape != "socket-per-pair" {
		sockets = 1
	}
	var cli, srv []net.Conn
	for range sockets {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			b.Fatal(err)
		}
		cli, srv = append(cli, c), append(srv, s)
	}
	defer func() {
		for _, c := range append(cli, srv...) {
			c.Close()
		}
	}()
	var left sync.WaitGroup
	per := max(1, b.N/pairs)
	var cw, sw *floorWriter
	left.Add(pairs)
	cpu0 := verbstest.ProcessCPU(b)
	b.ResetTimer()
	if shape == "socket-per-pair" {
		for p := range pairs {
			go func() { // the server's end echoes
				buf := make([]byte, floorMsg)
				for {
					if _, err := io.ReadFull(srv[p], buf); err != nil {
						return
					}
					if _, err := srv[p].Write(buf); err != nil {
						return
					}
				}
			}()
			go func() {
				defer left.Done()
				buf := make([]byte, floorMsg)
				for range per {
					if _, err := cli[p].Write(buf); err != nil {
						return
					}
					if _, err := io.ReadFull(cli[p], buf); err != nil {
						return
					}
				}
			}()
		}
	} else {
		gathered := shape == "mux-gathered"
		cw, sw = newFloorWriter(cli[0], gathered), newFloorWriter(srv[0], gathered)
		cin, sin := make([]chan []byte, pairs), make([]chan []byte, pairs)
		for p := range pairs {
			cin[p], sin[p] = make(chan []byte, 1), make(chan []byte, 1)
		}
		go floorDemux(cli[0], cin)
		go floorDemux(srv[0], sin)
		for p := range pairs {
			go func() { // the server's end echoes
				for m := range sin[p] {
					sw.send(uint32(p), m)
				}
			}()
			go func() {
				defer left.Done()
				buf := make([]byte, floorMsg)
				for range per {
					cw.send(uint32(p), buf)
					if _, ok := <-cin[p]; !ok {
						return
					}
				}
			}()
		}
	}
	left.Wait()
	b.StopTimer()
	if cw != nil {
		cw.stop()
		sw.stop()
	}
	cpu := verbstest.ProcessCPU(b) - cpu0
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(per*pairs), "cpu-ns/op")
	b.ReportMetric(float64(per*pairs)/b.Elapsed().Seconds(), "rt/s")
}

// floorDemux reads frames (pair, then the message) off c and hands each
// message to its pair's channel, in the pair's own buffer: a pair has one
// message in flight, taken before its next one comes.
func floorDemux(c net.Conn, to []chan []byte) {
	defer func() {
		for _, ch := range to {
			close(ch)
		}
	}()
	r := bufio.NewReaderSize(c, 64<<10)
	bufs := make([][]byte, len(to))
	for p := range bufs {
		bufs[p] = make([]byte, floorMsg)
	}
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		p := binary.LittleEndian.Uint32(hdr[:])
		if int(p) >= len(to) {
			return
		}
		if _, err := io.ReadFull(r, bufs[p]); err != nil {
			return
		}
		to[p] <- bufs[p]
	}
}

// floorWriter writes frames on one socket for every pair: each sender
// itself under a lock, or, gathered, a writer goroutine that writes what
// the senders queued meanwhile in one write.
type floorWriter struct {
	c        net.Conn
	gathered bool
	mu       sync.Mutex
	buf      []byte
	stopped  bool
	wake     chan struct{}
}

func newFloorWriter(c net.Conn, gathered bool) *floorWriter {
	w := &floorWriter{c: c, gathered: gathered, wake: make(chan struct{}, 1)}
	if gathered {
		go w.run()
	}
	return w
}

func (w *floorWriter) send(p uint32, m []byte) {
	w.mu.Lock()
	w.buf = binary.LittleEndian.AppendUint32(w.buf, p)
	w.buf = append(w.buf, m...)
	if !w.gathered {
		_, _ = w.c.Write(w.buf)
		w.buf = w.buf[:0]
		w.mu.Unlock()
		return
	}
	if !w.stopped {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	w.mu.Unlock()
}

// stop ends the writer goroutine, once no sender is left.
func (w *floorWriter) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gathered && !w.stopped {
		w.stopped = true
		close(w.wake)
	}
}

func (w *floorWriter) run() {
	var out []byte
	for range w.wake {
		w.mu.Lock()
		out, w.buf = w.buf, out[:0]
		w.mu.Unlock()
		if len(out) > 0 {
			if _, err := w.c.Write(out); err != nil {
				return
			}
		}
	}
}
