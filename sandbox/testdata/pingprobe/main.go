// Command pingprobe checks, from inside the sandbox, what ping needs: it sends one ICMP
// echo to 127.0.0.1 through an unprivileged ICMP socket (as iputils ping does without
// CAP_NET_RAW) and reports whether a raw socket can still be opened. Tests copy it into
// the container; it sends nothing beyond the container's own loopback.
package main

import (
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
)

func main() {
	if fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_ICMP); err == nil {
		syscall.Close(fd)
		fmt.Println("raw: allowed")
	} else {
		fmt.Println("raw:", err)
	}
	c, err := icmp.ListenPacket("udp4", "127.0.0.1")
	if err != nil {
		fmt.Println("ping:", err)
		os.Exit(1)
	}
	defer c.Close()
	msg, _ := (&icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: 1, Seq: 1, Data: []byte("probe")}}).Marshal(nil)
	if _, err := c.WriteTo(msg, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}); err != nil {
		fmt.Println("ping:", err)
		os.Exit(1)
	}
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 1500)
	n, _, err := c.ReadFrom(buf)
	if err != nil {
		fmt.Println("ping:", err)
		os.Exit(1)
	}
	if m, err := icmp.ParseMessage(1, buf[:n]); err != nil || m.Type != ipv4.ICMPTypeEchoReply {
		fmt.Println("ping: no echo reply")
		os.Exit(1)
	}
	fmt.Println("ping: ok")
}
