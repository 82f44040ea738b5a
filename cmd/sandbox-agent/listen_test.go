//go:build linux && (amd64 || arm64)

package main

import (
	"net"
	"testing"
)

// TestListenShared: two agents (several Caddy instances on one sandbox) both listen
// on the egress port, and each accepts connections made to it; a listener without
// SO_REUSEPORT (another program) still finds the port in use.
func TestListenShared(t *testing.T) {
	a, err := listenShared("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	addr := a.Addr().String()
	b, err := listenShared(addr)
	if err != nil {
		t.Fatalf("a second agent's listener on %s: %v", addr, err)
	}
	defer b.Close()
	if l, err := net.Listen("tcp", addr); err == nil {
		l.Close()
		t.Fatal("a listener without SO_REUSEPORT took the shared port")
	}
	got := map[net.Listener]int{}
	accepted := make(chan net.Listener, 64)
	for _, l := range []net.Listener{a, b} {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
				accepted <- l
			}
		}()
	}
	for range 64 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		got[<-accepted]++
		c.Close()
	}
	if got[a] == 0 || got[b] == 0 {
		t.Errorf("connections accepted: %d by the first, %d by the second; want both to take some", got[a], got[b])
	}
}
