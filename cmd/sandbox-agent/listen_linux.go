//go:build amd64 || arm64

package main

import (
	"context"
	"net"
	"syscall"
)

// soReusePort is SO_REUSEPORT on Linux for the agent's architectures (amd64, arm64);
// the syscall package does not name it.
const soReusePort = 0xf

// listenShared listens on a loopback TCP address with SO_REUSEPORT: several Caddy
// instances serving the same sandbox each run an agent here, and each agent's
// listener takes its share of the connections, rather than the first taking the port
// and the others finding it in use.
func listenShared(addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, soReusePort, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	return lc.Listen(context.Background(), "tcp", addr)
}
