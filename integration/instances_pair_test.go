package integration

import (
	"context"
	"path/filepath"
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
