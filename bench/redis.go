package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tidwall/redcon"
)

// serveRedis is a redcon server keeping SET's values in memory for GET.
func serveRedis(ln net.Listener) (func() error, error) {
	var mu sync.RWMutex
	data := map[string][]byte{}
	handler := func(conn redcon.Conn, cmd redcon.Command) {
		switch strings.ToLower(string(cmd.Args[0])) {
		case "set":
			if len(cmd.Args) != 3 {
				conn.WriteError("ERR wrong number of arguments for 'set'")
				return
			}
			mu.Lock()
			data[string(cmd.Args[1])] = bytes.Clone(cmd.Args[2])
			mu.Unlock()
			conn.WriteString("OK")
		case "get":
			if len(cmd.Args) != 2 {
				conn.WriteError("ERR wrong number of arguments for 'get'")
				return
			}
			mu.RLock()
			v, ok := data[string(cmd.Args[1])]
			mu.RUnlock()
			if !ok {
				conn.WriteNull()
				return
			}
			conn.WriteBulk(v)
		case "ping":
			conn.WriteString("PONG")
		default:
			conn.WriteError("ERR unknown command '" + string(cmd.Args[0]) + "'")
		}
	}
	done := make(chan error, 1)
	go func() { done <- redcon.Serve(ln, handler, nil, nil) }()
	return func() error {
		err := ln.Close()
		<-done
		return err
	}, nil
}

// redisValueSize is the size of every value.
const redisValueSize = 64

// redisKey and redisValue are worker w's i-th key and its value.
func redisKey(w, i int) string { return fmt.Sprintf("k:%d:%d", w, i) }

func redisValue(w, i int) []byte {
	v := make([]byte, redisValueSize)
	copy(v, fmt.Sprintf("v:%d:%d:", w, i))
	for j := len(fmt.Sprintf("v:%d:%d:", w, i)); j < len(v); j++ {
		v[j] = byte('a' + (w+i+j)%26)
	}
	return v
}

// redisWorkload: conns workers on a go-redis client with a pool of conns,
// each doing SET or GET ("set", "get"), in pipelines of pipe commands (1:
// one command at a time). An operation is a command; a latency is a
// pipeline's (or the command's).
func redisWorkload(name, op string, pipe, conns int) workload {
	return pacedRedisWorkload(name, op, pipe, conns, 0)
}

// pacedRedisWorkload is redisWorkload whose workers start an operation
// every pace at most (0: back to back): a quiet connection, whose latency
// is the figure (its ops/s is the pace's).
func pacedRedisWorkload(name, op string, pipe, conns int, pace time.Duration) workload {
	return workload{name: name, service: "redis", prepare: func(ctx context.Context, sc scale, t *transport, addr string) (*measure, error) {
		keys := sc.keys
		options := func(pool int) *redis.Options {
			return &redis.Options{
				Addr:            addr,
				Dialer:          func(ctx context.Context, _, a string) (net.Conn, error) { return t.dial(ctx, a) },
				PoolSize:        pool,
				Protocol:        2,
				DisableIdentity: true,
				ReadTimeout:     30 * time.Second,
				WriteTimeout:    30 * time.Second,
				DialTimeout:     10 * time.Second,
			}
		}
		// The keys are filled on a connection of their own, so that the
		// measured ones start fresh (a quiet one carries only its own).
		filler := redis.NewClient(options(1))
		values := make([][][]byte, conns)
		for w := range conns {
			values[w] = make([][]byte, keys)
			p := filler.Pipeline()
			for i := range keys {
				values[w][i] = redisValue(w, i)
				p.Set(ctx, redisKey(w, i), values[w][i], 0)
			}
			if _, err := p.Exec(ctx); err != nil {
				_ = filler.Close()
				return nil, fmt.Errorf("filling the keys: %w", err)
			}
		}
		if err := filler.Close(); err != nil {
			return nil, err
		}
		_ = t.paths() // the filler's connection is not a measured one
		client := redis.NewClient(options(conns))
		keyNames := make([][]string, conns)
		for w := range conns {
			keyNames[w] = make([]string, keys)
			for i := range keys {
				keyNames[w][i] = redisKey(w, i)
			}
		}
		return &measure{
			workers: conns,
			paced:   pace > 0,
			close:   client.Close,
			run: func(ctx context.Context, w int, until time.Time, lat []time.Duration) (int64, []time.Duration, error) {
				var ops int64
				i := 0
				for time.Now().Before(until) {
					start := time.Now()
					if pipe == 1 {
						k := i % keys
						if op == "set" {
							if err := client.Set(ctx, keyNames[w][k], values[w][k], 0).Err(); err != nil {
								return ops, lat, err
							}
						} else {
							v, err := client.Get(ctx, keyNames[w][k]).Bytes()
							if err != nil {
								return ops, lat, err
							}
							if !bytes.Equal(v, values[w][k]) {
								return ops, lat, fmt.Errorf("GET %s: %q, want %q", keyNames[w][k], v, values[w][k])
							}
						}
						i++
					} else {
						p := client.Pipeline()
						cmds := make([]redis.Cmder, pipe)
						for j := range pipe {
							k := (i + j) % keys
							if op == "set" {
								cmds[j] = p.Set(ctx, keyNames[w][k], values[w][k], 0)
							} else {
								cmds[j] = p.Get(ctx, keyNames[w][k])
							}
						}
						if _, err := p.Exec(ctx); err != nil {
							return ops, lat, err
						}
						for j, c := range cmds {
							k := (i + j) % keys
							if op == "set" {
								if s, err := c.(*redis.StatusCmd).Result(); err != nil || s != "OK" {
									return ops, lat, fmt.Errorf("SET %s: %q, %v", keyNames[w][k], s, err)
								}
							} else if v, err := c.(*redis.StringCmd).Bytes(); err != nil || !bytes.Equal(v, values[w][k]) {
								return ops, lat, fmt.Errorf("GET %s: %q, %v; want %q", keyNames[w][k], v, err, values[w][k])
							}
						}
						i += pipe
					}
					lat = append(lat, time.Since(start))
					ops += int64(pipe)
					if pace > 0 {
						time.Sleep(time.Until(start.Add(pace)))
					}
				}
				return ops, lat, nil
			},
		}, nil
	}}
}
