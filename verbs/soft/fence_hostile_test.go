//go:build linux

package soft_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
	"github.com/rdmanet/rdma/verbs/soft"
)

func init() { hostileRoles["stall"] = stallChild }

const (
	stallLen    = 32 << 20
	stallPart   = 1 << 20
	stallSecret = 0xee
)

// stallChild is a hostile client (arg: "read|write addr") that speaks the
// frame protocol itself. Given "rkey addr" on stdin, it asks for a 32 MiB
// READ of the region and leaves its socket unread, or sends 1 MiB of a
// 32 MiB WRITE into it; it says so, waits for "go" (the server has
// deregistered the region and filled its memory with a secret since),
// then takes the READ response or sends the rest of the WRITE, and reports
// how many secret bytes it received and the NAKs.
func stallChild(arg string) int {
	f := strings.Fields(arg)
	if len(f) != 2 {
		return 2
	}
	in := bufio.NewReader(os.Stdin)
	p, err := soft.RawDial(f[1])
	if err != nil {
		fmt.Println("error", err)
		return 3
	}
	defer p.Close()
	fmt.Println("connected")
	l, _ := in.ReadString('\n')
	var rkey uint32
	var addr uint64
	if _, err := fmt.Sscan(l, &rkey, &addr); err != nil {
		return 4
	}
	switch f[0] {
	case "read":
		err = p.Frame("read", 0, rkey, addr, stallLen, nil)
	case "write":
		err = p.Frame("write", 0, rkey, addr, stallLen, bytes.Repeat([]byte{0x55}, stallPart))
	}
	if err != nil {
		fmt.Println("error", err)
		return 5
	}
	fmt.Println("stalled")
	if l, _ := in.ReadString('\n'); l != "go\n" {
		return 6
	}
	if f[0] == "write" {
		go func() {
			b := bytes.Repeat([]byte{0x66}, stallPart)
			for n := stallLen - stallPart; n > 0; n -= stallPart {
				if p.Payload(b) != nil {
					return
				}
			}
		}()
	}
	secret, naks, err := p.Drain(time.Now().Add(5*time.Second), stallSecret)
	fmt.Println("secret", secret, "naks", strings.Join(append(naks, "-"), ","), "end", err != nil)
	return 0
}

// A peer of another uid that stalls in the middle of a READ of a region,
// or of a WRITE into it, while the server deregisters it: Dereg returns at
// once, the peer receives nothing the memory held after Dereg (the
// READ's response ends with the connection), and nothing the peer sends
// afterwards lands (the WRITE fails with a remote access error). Before
// the fence, the READ's response carried 31 MiB of the secret and the
// WRITE's rest overwrote it.
func TestFenceStalledPeerOtherUID(t *testing.T) {
	needRoot(t)
	for _, mode := range []string{"read", "write"} {
		t.Run(mode, func(t *testing.T) {
			srv, addr := listenSoft(t, net.IPv4(127, 0, 3, 1))
			defer srv.close()
			_, in, out := startChild(t, "stall", mode+" "+addr, nobody)
			require.NoError(t, srv.accept())
			line := func() string {
				l, err := out.ReadString('\n')
				require.NoError(t, err)
				return l
			}
			require.Equal(t, "connected\n", line())
			mem, err := verbs.AllocMemory(stallLen)
			require.NoError(t, err)
			defer mem.Free()
			b := mem.Bytes()
			for i := range b {
				b[i] = 0x11
			}
			mr, err := srv.pd.RegMR(b, verbs.AccessLocalWrite|verbs.AccessRemoteRead|verbs.AccessRemoteWrite)
			require.NoError(t, err)
			_, err = fmt.Fprintln(in, mr.RKey(), mr.Addr())
			require.NoError(t, err)
			require.Equal(t, "stalled\n", line())
			if mode == "write" {
				require.Eventually(t, func() bool { return b[stallPart-1] == 0x55 }, 10*time.Second, time.Millisecond)
			} else {
				time.Sleep(100 * time.Millisecond) // the response fills the socket
			}
			done := make(chan error, 1)
			go func() { done <- mr.Dereg() }()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(10 * time.Second):
				t.Fatal("Dereg waited for the stalled peer")
			}
			for i := range b {
				b[i] = stallSecret
			}
			_, err = fmt.Fprintln(in, "go")
			require.NoError(t, err)
			f := strings.Fields(line())
			require.Len(t, f, 6, "child's report")
			n, err := strconv.Atoi(f[1])
			require.NoError(t, err)
			assert.Zero(t, n, "secret bytes the peer received")
			if mode == "write" {
				assert.Contains(t, f[3], "rem_access")
				for i, c := range b {
					if c != stallSecret {
						t.Fatalf("byte %d of the region changed after Dereg returned (%#x)", i, c)
					}
				}
			} else {
				assert.Equal(t, "true", f[5], "the response cannot have been finished")
			}
		})
	}
}
