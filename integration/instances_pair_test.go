package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// startPair starts two Caddy processes, A and B, with the same site (directives added
// to its mcp_sandbox block) and one shared storage; their Caddyfiles differ only in
// their port and log file (in dir, as A.log and B.log). The site's container and
// volume go when the test ends.
func startPair(t *testing.T, directives ...string) (site *testsite.Site, a, b *instance) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs Docker")
	}
	bin := caddyBinary(t)
	site = testsite.New(t)
	t.Cleanup(func() {
		// Cleanups run last first: this one runs once the processes are stopped.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = site.Docker.ContainerRemove(ctx, site.Container, container.RemoveOptions{Force: true})
		_ = site.Docker.VolumeRemove(ctx, site.Volume, true)
	})
	dir := t.TempDir()
	siteOf := func(name string, port int) string {
		s := *site
		s.Port = port
		return s.Caddyfile(testsite.Options{Directive: directives, Log: filepath.Join(dir, name+".log")})
	}
	portB := testsite.FreePort(t)
	a = startInstance(t, bin, dir, "A", site.Port, siteOf("A", site.Port))
	b = startInstance(t, bin, dir, "B", portB, siteOf("B", portB))
	return site, a, b
}

// startBalancer starts a third Caddy on port (its files in dir, as C.*) that balances
// the instances round robin, with no affinity: each request goes to the next one. It
// keeps each request's Host as it came (Caddy's default) and retries a request whose
// upstream refuses the connection on the next one, for 5 s.
func startBalancer(t *testing.T, bin, dir string, port int, upstreams ...*instance) *instance {
	t.Helper()
	var to []string
	for _, in := range upstreams {
		to = append(to, strings.TrimPrefix(in.url, "http://"))
	}
	return startInstance(t, bin, dir, "C", port, fmt.Sprintf(`{
	admin off
	persist_config off
	auto_https off
	storage file_system %s
	log {
		output file %s
	}
}

http://127.0.0.1:%d {
	bind 127.0.0.1
	reverse_proxy %s {
		lb_policy round_robin
		lb_try_duration 5s
		lb_try_interval 100ms
		fail_duration 10s
		# A kept-alive connection to an instance that was killed fails the next POST
		# with 502, and the proxy retries only what could not connect: one connection
		# per request, as docs/operations.md advises.
		transport http {
			keepalive off
		}
	}
}
`, testsite.StorageDir(t), filepath.Join(dir, "C.log"), port, strings.Join(to, " ")))
}
