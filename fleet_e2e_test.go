package mcpsandbox

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/docker/docker/api/types/container"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// These tests use a sandbox after the config that made it has stopped, which no client
// can do, so they hold the handler itself; the rest of the fleet's end-to-end tests are
// in ../integration.

// siteHandler is the mcp_sandbox handler of the config Caddy runs now.
func siteHandler(t testing.TB) *Handler {
	t.Helper()
	app, err := caddy.ActiveContext().App("http")
	if err != nil {
		t.Fatal(err)
	}
	var find func(routes caddyhttp.RouteList) *Handler
	find = func(routes caddyhttp.RouteList) *Handler {
		for _, r := range routes {
			for _, mh := range r.Handlers {
				switch v := mh.(type) {
				case *Handler:
					return v
				case *caddyhttp.Subroute:
					if h := find(v.Routes); h != nil {
						return h
					}
				}
			}
		}
		return nil
	}
	for _, srv := range app.(*caddyhttp.App).Servers {
		if h := find(srv.Routes); h != nil {
			return h
		}
	}
	t.Fatal("no mcp_sandbox handler in the running config")
	return nil
}

// TestStoppedSiteLeavesItsContainerAlone: once Caddy stops, a command still under way
// on the sandbox and any later use of it find the removed container gone and leave it
// so, instead of bringing it back, running, after the site is gone.
func TestStoppedSiteLeavesItsContainerAlone(t *testing.T) {
	s := startSite(t, siteOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	call(ctx, t, s.client(ctx), "execute", map[string]any{"command": "true"})
	sb := siteHandler(t).fleet.Operator().Sandbox()
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(ctx, "sleep 3", boxapi.ExecOptions{})
		done <- err
	}()
	time.Sleep(time.Second)
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.docker.ContainerRemove(ctx, s.container, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	<-done
	if _, err := sb.Exec(ctx, "true", boxapi.ExecOptions{}); !errors.Is(err, sandbox.ErrClosed) {
		t.Errorf("a command after Caddy stopped: %v, want ErrClosed", err)
	}
	if _, err := s.docker.ContainerInspect(ctx, s.container); err == nil {
		t.Fatal("the container removed after Caddy stopped is back")
	}
}

// TestStoppedSitePlacesNoSandbox: a call that outlives its config (a task under way
// when Caddy stops) gets no sandbox for a person the config had not placed yet, where
// it would have made a container nothing removes.
func TestStoppedSitePlacesNoSandbox(t *testing.T) {
	p := startPeopleSite(t, []string{"alice"})
	h := siteHandler(t)
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := h.fleet.For(ctx, "alice")
	if err == nil {
		_, err = e.Sandbox().Exec(ctx, "true", boxapi.ExecOptions{})
	}
	if !errors.Is(err, sandbox.ErrClosed) {
		t.Errorf("alice's sandbox after Caddy stopped: %v, want ErrClosed", err)
	}
	if _, err := p.docker.ContainerInspect(ctx, p.containerOf("alice")); err == nil {
		t.Fatal("alice's container was made after Caddy stopped")
	}
}
