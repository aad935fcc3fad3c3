package main

import (
	"context"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

func yamuxConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	c.LogOutput = io.Discard
	return c
}

// serveYamux runs a yamux server session on each connection; every
// stream echoes what it reads.
func serveYamux(ln net.Listener) (func() error, error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var sessions []*yamux.Session
	closed := false
	serveEach(&wg, ln, func(c net.Conn) {
		s, err := yamux.Server(c, yamuxConfig())
		if err != nil {
			_ = c.Close()
			return
		}
		mu.Lock()
		if closed { // stopped while this session started
			mu.Unlock()
			_ = s.Close()
			return
		}
		sessions = append(sessions, s)
		mu.Unlock()
		serveEach(&wg, s, func(st net.Conn) {
			_, _ = io.Copy(st, st)
			_ = st.Close()
		})
	})
	return func() error {
		err := ln.Close()
		mu.Lock()
		closed = true
		for _, s := range sessions {
			_ = s.Close()
		}
		mu.Unlock()
		wg.Wait()
		return err
	}, nil
}

// serveEach accepts from ln (a listener, or a yamux session's streams)
// until it fails, and runs handle on each connection; every goroutine is
// wg's.
func serveEach(wg *sync.WaitGroup, ln net.Listener, handle func(net.Conn)) {
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { handle(c) })
		}
	})
}

// yamuxWorkload: streams yamux streams over one connection, each writing
// size bytes and reading their echo in turn.
func yamuxWorkload(name string, size, streams int) workload {
	return workload{name: name, service: "yamux", prepare: func(ctx context.Context, sc scale, t *transport, addr string) (*measure, error) {
		c, err := t.dial(ctx, addr)
		if err != nil {
			return nil, err
		}
		sess, err := yamux.Client(c, yamuxConfig())
		if err != nil {
			_ = c.Close()
			return nil, err
		}
		sts := make([]net.Conn, streams)
		for i := range sts {
			if sts[i], err = sess.Open(); err != nil {
				_ = sess.Close()
				return nil, err
			}
		}
		return &measure{
			workers: streams,
			close:   sess.Close,
			run: func(ctx context.Context, w int, until time.Time, lat []time.Duration) (int64, []time.Duration, error) {
				st := sts[w]
				msg := make([]byte, size)
				got := make([]byte, size)
				for i := 16; i < size; i++ {
					msg[i] = byte(w ^ i)
				}
				return echoLoop(w, msg, until, lat, "yamux echo", func() ([]byte, error) {
					if err := st.SetDeadline(time.Now().Add(time.Minute)); err != nil {
						return nil, err
					}
					if _, err := st.Write(msg); err != nil {
						return nil, err
					}
					_, err := io.ReadFull(st, got)
					return got, err
				})
			},
		}, nil
	}}
}
