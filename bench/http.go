package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// httpPattern is the content of every body: a body of n bytes is its first n.
var httpPattern = func() []byte {
	b := make([]byte, 1<<20)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}()

// serveHTTP is an http.Server whose /b?n=N answers N bytes of
// httpPattern and echoes the X-Id request header.
func serveHTTP(ln net.Listener) (func() error, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/b", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.URL.Query().Get("n"))
		if err != nil || n < 0 || n > len(httpPattern) {
			http.Error(w, "bad n", http.StatusBadRequest)
			return
		}
		w.Header().Set("X-Id", r.Header.Get("X-Id"))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		_, _ = w.Write(httpPattern[:n])
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 30 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	return func() error {
		err := srv.Close()
		if e := <-done; !errors.Is(e, http.ErrServerClosed) {
			err = errors.Join(err, e)
		}
		return err
	}, nil
}

// httpWorkload: clients workers on one http.Transport with keep-alive,
// each GETting size-byte bodies; each body and its X-Id are checked.
func httpWorkload(name string, size, clients int) workload {
	return workload{name: name, service: "http", prepare: func(ctx context.Context, sc scale, t *transport, addr string) (*measure, error) {
		tr := &http.Transport{
			DialContext:         func(ctx context.Context, _, a string) (net.Conn, error) { return t.dial(ctx, a) },
			MaxIdleConns:        clients,
			MaxIdleConnsPerHost: clients,
			MaxConnsPerHost:     clients,
			DisableCompression:  true,
			IdleConnTimeout:     time.Minute,
		}
		client := &http.Client{Transport: tr, Timeout: time.Minute}
		url := "http://" + addr + "/b?n=" + strconv.Itoa(size)
		return &measure{
			workers: clients,
			close:   func() error { tr.CloseIdleConnections(); return nil },
			run: func(ctx context.Context, w int, until time.Time, lat []time.Duration) (int64, []time.Duration, error) {
				body := make([]byte, size)
				var ops int64
				for time.Now().Before(until) {
					start := time.Now()
					req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
					if err != nil {
						return ops, lat, err
					}
					id := strconv.Itoa(w) + ":" + strconv.FormatInt(ops, 10)
					req.Header.Set("X-Id", id)
					resp, err := client.Do(req)
					if err != nil {
						return ops, lat, err
					}
					_, err = io.ReadFull(resp.Body, body)
					if err == nil {
						var one [1]byte
						if n, _ := resp.Body.Read(one[:]); n != 0 {
							err = errors.New("body longer than asked")
						}
					}
					_ = resp.Body.Close()
					switch {
					case err != nil:
						return ops, lat, err
					case resp.StatusCode != http.StatusOK:
						return ops, lat, fmt.Errorf("status %s", resp.Status)
					case resp.Header.Get("X-Id") != id:
						return ops, lat, fmt.Errorf("X-Id %q, want %q", resp.Header.Get("X-Id"), id)
					case string(body) != string(httpPattern[:size]):
						return ops, lat, errors.New("body differs from the pattern")
					}
					lat = append(lat, time.Since(start))
					ops++
				}
				return ops, lat, nil
			},
		}, nil
	}}
}
