package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// roleEnv makes the bench binary a server process (serveMain) when set to
// "server": the bench starts its servers by running itself again.
const roleEnv = "RDMA_BENCH_ROLE"

// request is one line the bench sends a server process on its stdin.
type request struct {
	Op        string    `json:"op"` // start, stop, cpu, raft-start, raft-boot, raft-state, raft-apply, raft-failover
	Service   string    `json:"service,omitempty"`
	Transport string    `json:"transport,omitempty"`
	Raft      *raftArgs `json:"raft,omitempty"`
}

// reply is the server process's answer, one line on its stdout.
type reply struct {
	Err   string     `json:"err,omitempty"`
	Addr  string     `json:"addr,omitempty"`
	CPU   cpuTime    `json:"cpu"`
	Paths string     `json:"paths,omitempty"`
	Raft  *raftReply `json:"raft,omitempty"`
}

// callTimeout bounds every exchange with a server process: one that does
// not answer by then is killed, and the run fails.
const callTimeout = 3 * time.Minute

// child is a server process and its control pipes.
type child struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	enc   *json.Encoder
	dec   *json.Decoder
	mu    sync.Mutex
	dead  bool
	waitc chan error
}

// startChild runs this binary as a server process with env added.
func startChild(env []string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(append(os.Environ(), roleEnv+"=server"), env...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, in: in, enc: json.NewEncoder(in), dec: json.NewDecoder(bufio.NewReader(out)), waitc: make(chan error, 1)}
	return c, nil
}

// call sends req and returns the reply; an error reply is an error.
func (c *child) call(req request) (reply, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return reply{}, errors.New("bench: the server process was stopped")
	}
	t := time.AfterFunc(callTimeout, func() { _ = c.cmd.Process.Kill() })
	defer t.Stop()
	if err := c.enc.Encode(req); err != nil {
		return reply{}, fmt.Errorf("bench: server process (%s): %w", req.Op, err)
	}
	var r reply
	if err := c.dec.Decode(&r); err != nil {
		return reply{}, fmt.Errorf("bench: server process (%s): no answer: %w", req.Op, err)
	}
	if r.Err != "" {
		return r, fmt.Errorf("bench: server process (%s %s %s): %s", req.Op, req.Service, req.Transport, r.Err)
	}
	return r, nil
}

// cpu is the server process's CPU time so far.
func (c *child) cpu() (cpuTime, error) {
	r, err := c.call(request{Op: "cpu"})
	return r.CPU, err
}

// kill stops the process at once (SIGKILL), as a crash would.
func (c *child) kill() {
	c.mu.Lock()
	c.dead = true
	c.mu.Unlock()
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
}

// close ends the process: its stdin closes, which ends it; after 10 s it
// is killed.
func (c *child) close() error {
	_ = c.in.Close()
	go func() { c.waitc <- c.cmd.Wait() }()
	select {
	case err := <-c.waitc:
		if c.dead {
			return nil
		}
		return err
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.waitc
		return errors.New("bench: a server process did not end within 10 s of its stdin closing; killed")
	}
}
