//go:build linux

package soft_test

import (
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/rdmanet/rdma/verbs"
	"github.com/rdmanet/rdma/verbs/soft"
)

func init() { hostileRoles["flood"] = floodChild }

// floodChild dials a soft listener from one source address as fast as it
// can, up to a count of connections, and holds them until its stdin
// closes: in mode "req" each sends a whole connection request at once and
// then nothing more, in mode "silent" nothing. It prints "flooding" once it
// holds announce connections.
func floodChild(arg string) int {
	f := strings.Fields(arg) // addr src count announce mode
	if len(f) != 5 {
		return 2
	}
	n, _ := strconv.Atoi(f[2])
	announce, _ := strconv.Atoi(f[3])
	var req []byte
	if f[4] == "req" {
		req = soft.RawREQ(1, nil) // TCP
	}
	stop := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(f[1])}, Timeout: 10 * time.Second}
	var (
		mu    sync.Mutex
		held  []net.Conn
		tries atomic.Int64
		once  sync.Once
		wg    sync.WaitGroup
	)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for tries.Add(1) <= int64(n) {
				select {
				case <-stop:
					return
				default:
				}
				c, err := d.Dial("tcp", f[0])
				if err != nil {
					continue // a SYN the full listen queue dropped, say: go on
				}
				if req != nil {
					_, _ = c.Write(req)
				}
				mu.Lock()
				held = append(held, c)
				k := len(held)
				mu.Unlock()
				if k >= announce {
					once.Do(func() { fmt.Println("flooding") })
				}
			}
		}()
	}
	wg.Wait()
	once.Do(func() { fmt.Println("flooding") })
	<-stop
	for _, c := range held {
		c.Close()
	}
	return 0
}

// needNoFile skips the test unless this process may open n descriptors.
func needNoFile(t *testing.T, n uint64) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur < n {
		t.Skipf("needs %d descriptors (RLIMIT_NOFILE %d)", n, rl.Cur)
	}
}

// One host that fills a listener's admission with connections, their
// requests all there or all silent, and keeps dialing, does not keep
// another host's dial out: a child (as nobody, when the test runs as root)
// floods from 127.0.5.2 while the listener's consumer spends 5 ms on each
// request (as one that sets up a QP and registers memory for it would),
// and a client from 127.0.5.3 still connects within 2 s. Before waiting
// connections were bounded per host, the flood took all 1,024 waiting
// places, and the listener stopped accepting until one moved on (a
// request there is never ended; a silent connection only after a second),
// so that the client's connection queued behind the flood's in the
// kernel's listen queue: its connect timed out (5 s) in both modes.
func TestAdmissionFloodFromOneHost(t *testing.T) {
	needNoFile(t, 16384)
	uid := 0
	if os.Geteuid() == 0 {
		uid = nobody
	}
	for _, mode := range []string{"req", "silent"} {
		t.Run(mode, func(t *testing.T) {
			srv, addr := listenSoft(t, net.IPv4(127, 0, 5, 1))
			victim := net.IPv4(127, 0, 5, 3)
			accepted := make(chan error, 1)
			var consumer sync.WaitGroup
			consumer.Add(1)
			go func() {
				defer consumer.Done()
				ends := &softEnds{} // the accepted connection's
				defer ends.close()
				for {
					ev, err := srv.ch.GetEvent(time.Now().Add(100 * time.Millisecond))
					if err != nil {
						if os.IsTimeout(err) {
							continue
						}
						return
					}
					if ev.Type != verbs.EventConnectRequest {
						continue
					}
					if !ev.ID.RemoteAddr().IP.Equal(victim) {
						time.Sleep(5 * time.Millisecond)
						_ = ev.ID.Reject(nil)
						_ = ev.ID.Destroy()
						continue
					}
					ends.ids = append(ends.ids, ev.ID)
					err = ends.makeQP(ev.ID)
					if err == nil {
						err = ev.ID.Accept(&verbs.ConnParam{RetryCount: 7, RNRRetryCount: 7})
					}
					accepted <- err
				}
			}()
			defer func() {
				srv.close()
				consumer.Wait()
			}()

			const count, announce = 12000, 1500
			_, in, out := startChild(t, "flood", fmt.Sprintf("%s 127.0.5.2 %d %d %s", addr, count, announce, mode), uid)
			defer in.Close()
			l, err := out.ReadString('\n')
			require.NoError(t, err)
			require.Equal(t, "flooding\n", l)
			time.Sleep(200 * time.Millisecond) // the flood goes on

			start := time.Now()
			c, err := dialSoftFrom(victim, addr)
			took := time.Since(start)
			if c != nil {
				defer c.close()
			}
			require.NoError(t, err, "a client from another host was kept out (after %v)", took)
			require.NoError(t, <-accepted)
			t.Logf("connected in %v during the flood", took)
			require.Less(t, took, 2*time.Second, "a client from another host waited behind the flood")
		})
	}
}
