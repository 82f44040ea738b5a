//go:build !linux || !(amd64 || arm64)

package main

import "net"

// listenShared listens on addr (SO_REUSEPORT is set on Linux on amd64 and arm64 only).
func listenShared(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
