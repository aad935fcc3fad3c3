// Command nolibs is what a user of the module writes: an echo over rdma.Conn
// on loopback. TestBuildWithoutRDMACore builds and runs it where rdma-core's
// headers and libraries are hidden.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/rdmanet/rdma"
	"github.com/rdmanet/rdma/verbs/rdmacore"
)

func main() {
	ln, err := rdma.Listen("rdma", "127.0.0.1:0")
	if err != nil {
		fmt.Println("listen:", err)
		os.Exit(1)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		io.Copy(c, c)
		c.Close()
	}()
	c, err := rdma.Dial("rdma", ln.Addr().String())
	if err != nil {
		fmt.Println("dial:", err)
		os.Exit(1)
	}
	defer c.Close()
	buf := make([]byte, 4)
	if _, err := c.Write([]byte("ping")); err != nil {
		fmt.Println("write:", err)
		os.Exit(1)
	}
	if _, err := io.ReadFull(c, buf); err != nil {
		fmt.Println("read:", err)
		os.Exit(1)
	}
	provider := c.(*rdma.Conn).Provider()
	fmt.Printf("echo %q over %s\n", buf, provider)
	if err := rdmacore.Available(); err != nil && provider == rdma.ProviderSoft {
		fmt.Println("fell back to soft:", err)
	}
}
