package faultnet_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/ringlimit/ringlimit/internal/testonly/faultnet"
)

// A cut link holds a stream's bytes; they arrive, once, when it heals.
func Example() {
	n := faultnet.New()
	defer n.Close()

	lis, err := n.Listen("node-1")
	if err != nil {
		panic(err)
	}
	defer lis.Close()
	c, err := n.Dial(context.Background(), "node-2", lis.Addr().String())
	if err != nil {
		panic(err)
	}
	defer c.Close()
	s, err := lis.Accept()
	if err != nil {
		panic(err)
	}
	defer s.Close()
	fmt.Println(lis.Addr(), "accepted a connection from", s.RemoteAddr().(faultnet.Addr).Node)

	n.Cut("node-1", "node-2")
	_, err = c.Write([]byte("hello"))
	fmt.Println("write while cut:", err)
	s.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err = s.Read(make([]byte, 5))
	fmt.Println("read while cut times out:", errors.Is(err, os.ErrDeadlineExceeded))

	n.Heal("node-1", "node-2")
	s.SetReadDeadline(time.Time{})
	buf := make([]byte, 5)
	if _, err := io.ReadFull(s, buf); err != nil {
		panic(err)
	}
	fmt.Printf("after heal: %s (%d bytes delivered)\n", buf, n.Stats("node-2", "node-1").Bytes)
	// Output:
	// node-1:1 accepted a connection from node-2
	// write while cut: <nil>
	// read while cut times out: true
	// after heal: hello (5 bytes delivered)
}
