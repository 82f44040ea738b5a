package mcpsandbox

import (
	"context"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testengine"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// TestMain gives the tests' Caddy a data directory of its own, removed at the end: each
// test container gets a directory there for the agent's direct channel.
func TestMain(m *testing.M) { testsite.Main(m) }

// The tests here that need a running site reach into the handler too (its pool, its
// placement); they use internal/testsite, the end-to-end suite's harness
// (../integration), through these short names.

type siteOptions struct {
	image     string
	directive []string
}

type site struct {
	*testsite.Site
	t                                    testing.TB
	url, key, container, volume, storage string
	docker                               *client.Client
}

func wrapSite(s *testsite.Site) *site {
	return &site{Site: s, t: s.T, url: s.URL, key: s.Key, container: s.Container, volume: s.Volume, storage: s.Storage, docker: s.Docker}
}

func newSite(t testing.TB) *site { t.Helper(); return wrapSite(testsite.New(t)) }

func startSite(t testing.TB, opts siteOptions) *site {
	t.Helper()
	s := newSite(t)
	s.start(opts)
	return s
}

func (o siteOptions) options() testsite.Options {
	return testsite.Options{Image: o.image, Directive: o.directive}
}

func (s *site) start(opts siteOptions) { s.t.Helper(); s.Start(opts.options()) }
func (s *site) client(ctx context.Context) *mcpclient.Client {
	s.t.Helper()
	return s.Client(ctx)
}
func (s *site) clientWith(ctx context.Context, base, version string) *mcpclient.Client {
	s.t.Helper()
	return s.ClientWith(ctx, base, version)
}

// peopleSite is a site with `person` lines on any host; keys are by person.
type peopleSite struct {
	*site
	keys map[string]string
}

func startPeopleSite(t testing.TB, people []string) *peopleSite {
	t.Helper()
	s := newSite(t)
	p := &peopleSite{site: s, keys: map[string]string{}}
	for _, name := range people {
		p.keys[name] = name + "-key-" + testenv.RandomHex(16)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, name := range people {
			_ = s.docker.ContainerRemove(ctx, s.container+"-"+name, container.RemoveOptions{Force: true})
			_ = s.docker.VolumeRemove(ctx, s.volume+"-"+name, true)
		}
	})
	s.Start(p.options(people))
	return p
}

// options are the site's with person lines for people.
func (p *peopleSite) options(people []string) testsite.Options {
	var lines []string
	for _, name := range people {
		lines = append(lines, "person "+name+" "+p.keys[name])
	}
	return testsite.Options{Address: "http://:%d", Directive: lines}
}

func (p *peopleSite) load(opts testsite.Options) { p.t.Helper(); p.Load(opts) }

func (p *peopleSite) client(ctx context.Context, person string) *mcpclient.Client {
	p.t.Helper()
	return p.ClientAs(ctx, p.url, mcp.LATEST_PROTOCOL_VERSION, p.keys[person])
}

func (p *peopleSite) containerOf(person string) string { return p.container + "-" + person }

var (
	call       = testsite.Call
	structured = testsite.Structured
	resultText = testsite.ResultText
	testImage  = testengine.Image
	randomHex  = testenv.RandomHex
	waitFor    = testenv.WaitFor
)
