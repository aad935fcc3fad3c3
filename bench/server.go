package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
)

// Environment of a server process, set by the bench that starts it.
const (
	providerEnv = "RDMA_BENCH_PROVIDER" // rdma's Config.Provider
	hostEnv     = "RDMA_BENCH_HOST"     // the address to listen on
)

// serveMain is a server process: it reads requests on stdin and answers
// each on stdout until stdin ends.
func serveMain() int {
	s := &server{provider: os.Getenv(providerEnv), host: os.Getenv(hostEnv)}
	if s.host == "" {
		s.host = "127.0.0.1"
	}
	dec := json.NewDecoder(os.Stdin)
	enc := json.NewEncoder(os.Stdout)
	for {
		var req request
		if err := dec.Decode(&req); err != nil {
			s.stopAll()
			if errors.Is(err, io.EOF) {
				return 0
			}
			fmt.Fprintln(os.Stderr, "bench server:", err)
			return 1
		}
		r := s.handle(req)
		if err := enc.Encode(r); err != nil {
			s.stopAll()
			return 1
		}
	}
}

// server is a server process's state: the services it runs now.
type server struct {
	provider, host string
	mu             sync.Mutex
	running        []*service
	raft           *raftNode
}

// service is one workload's server on its listener.
type service struct {
	ln   *trackingListener
	stop func() error // closes the listener and what serves it
}

func (s *server) handle(req request) reply {
	switch req.Op {
	case "cpu":
		return reply{CPU: processCPU()}
	case "start":
		return s.start(req)
	case "stop":
		return s.stopAll()
	case "raft-start", "raft-boot", "raft-state", "raft-apply", "raft-failover":
		return s.raftOp(req)
	}
	return reply{Err: fmt.Sprintf("unknown op %q", req.Op)}
}

// serveFuncs start a workload's server on a listener and return what stops it.
var serveFuncs = map[string]func(net.Listener) (func() error, error){
	"redis": serveRedis,
	"http":  serveHTTP,
	"grpc":  serveGRPC,
	"yamux": serveYamux,
}

func (s *server) start(req request) reply {
	serve, ok := serveFuncs[req.Service]
	if !ok {
		return reply{Err: fmt.Sprintf("unknown service %q", req.Service)}
	}
	_, ln, err := s.listen(req.Transport)
	if err != nil {
		return reply{Err: err.Error()}
	}
	tl := &trackingListener{Listener: ln}
	stop, err := serve(tl)
	if err != nil {
		_ = ln.Close()
		return reply{Err: err.Error()}
	}
	s.mu.Lock()
	s.running = append(s.running, &service{ln: tl, stop: stop})
	s.mu.Unlock()
	return reply{Addr: ln.Addr().String()}
}

// listen listens on the server's host over the transport of that name
// (newTransport's).
func (s *server) listen(name string) (*transport, net.Listener, error) {
	t, err := newTransport(name, s.provider, s.host)
	if err != nil {
		return nil, nil, err
	}
	ln, err := t.listen()
	if err != nil {
		return nil, nil, err
	}
	return t, ln, nil
}

// stopAll stops every service; the reply carries the paths their
// accepted connections were on.
func (s *server) stopAll() reply {
	s.mu.Lock()
	running := s.running
	s.running = nil
	s.mu.Unlock()
	var r reply
	var errs []error
	for _, sv := range running {
		r.Paths = sv.ln.paths()
		errs = append(errs, sv.stop())
	}
	if s.raft != nil {
		errs = append(errs, s.raft.shutdown())
		s.raft = nil
	}
	if err := errors.Join(errs...); err != nil {
		r.Err = err.Error()
	}
	return r
}
