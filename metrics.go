package mcpsandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/links"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/mcptools"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/preview"
)

// Metrics live for the whole process, so counts survive config reloads; each config's
// registry gets them registered once.
var (
	metricCleanupDeleted = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "cleanup_deleted_total",
		Help: "Idle top-level entries of /sandbox deleted by the cleanup.",
	})
	metricPreviewsLive = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "previews_live",
		Help: "Ports exposed by expose_port that are live now.",
	}, func() float64 { return float64(preview.Shared().Live()) })
	metricPreviewRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "preview_requests_total",
		Help: "Requests to preview hosts, by result (ok, not_found, no_listener, unauthorized, error).",
	}, []string{"result"})
	metricPersonCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "person_calls_total",
		Help: "Tool calls, by the person whose sandbox they used (- for the operator's).",
	}, []string{"person"})
	metricPreviewBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "preview_bytes_total",
		Help: "Response bytes sent to people through previews (WebSocket traffic is not counted).",
	})
	metricIdleStops = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "idle_stops_total",
		Help: "Sandbox containers stopped after idle_stop without use.",
	})
)

// agentCollector reports, per sandbox container, whether its commands run through the
// agent inside it and how many agents it has started. It reads the pooled sandboxes
// when scraped, so a sandbox counts while some config holds it.
type agentCollector struct{}

var (
	descAgentRunning = prometheus.NewDesc(prometheus.BuildFQName("caddy", "mcp_sandbox", "agent_running"),
		"1 when the sandbox's commands run through the agent in its container, 0 on the fallback (one Docker exec per call).",
		[]string{"container"}, nil)
	descAgentStarts = prometheus.NewDesc(prometheus.BuildFQName("caddy", "mcp_sandbox", "agent_starts_total"),
		"Agents the sandbox has started in its container.",
		[]string{"container"}, nil)
)

func (agentCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descAgentRunning
	ch <- descAgentStarts
}

func (agentCollector) Collect(ch chan<- prometheus.Metric) {
	// A reload with new settings briefly holds two sandboxes of one container: they
	// are reported as one (running if either runs, their starts added).
	type agent struct {
		running bool
		starts  int
	}
	byName := map[string]*agent{}
	sandboxes.Range(func(_, v any) bool {
		e, ok := v.(*sandboxEntry)
		if !ok {
			return true
		}
		name := e.sb.Config().Container
		a := byName[name]
		if a == nil {
			a = &agent{}
			byName[name] = a
		}
		running, _ := e.sb.AgentStatus()
		a.running = a.running || running
		a.starts += e.sb.AgentStarts()
		return true
	})
	for name, a := range byName {
		v := 0.0
		if a.running {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descAgentRunning, prometheus.GaugeValue, v, name)
		ch <- prometheus.MustNewConstMetric(descAgentStarts, prometheus.CounterValue, float64(a.starts), name)
	}
}

// sandboxCollector counts the pooled sandboxes (the operator's and every person's a
// config holds) by engine and by their container's state: running, exited, created,
// ..., missing (not created yet), or stopped (for idleness; the next call starts it
// again). It asks each Docker engine once per scrape, with one container listing.
type sandboxCollector struct{}

var descSandboxes = prometheus.NewDesc(prometheus.BuildFQName("caddy", "mcp_sandbox", "sandboxes"),
	"Sandboxes in use by the configuration, by engine (\"\" without engine lines) and the state of their container (stopped: for idleness; missing: not created yet).",
	[]string{"engine", "state"}, nil)

func (sandboxCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descSandboxes }

func (sandboxCollector) Collect(ch chan<- prometheus.Metric) {
	type engineKey struct {
		cli  *client.Client
		name string
	}
	byEngine := map[engineKey]map[string]bool{} // container -> stopped for idleness
	sandboxes.Range(func(_, v any) bool {
		if e, ok := v.(*sandboxEntry); ok {
			k := engineKey{e.cli, e.engine.Name}
			if byEngine[k] == nil {
				byEngine[k] = map[string]bool{}
			}
			name := e.sb.Config().Container
			byEngine[k][name] = byEngine[k][name] || e.idle.stopped.Load()
		}
		return true
	})
	type countKey struct{ engine, state string }
	counts := map[countKey]float64{}
	for k, names := range byEngine {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		args := filters.NewArgs()
		for n := range names {
			args.Add("name", n)
		}
		list, err := k.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: args})
		cancel()
		if err != nil {
			counts[countKey{k.name, "unknown"}] += float64(len(names))
			continue
		}
		found := 0
		for _, c := range list {
			for _, n := range c.Names {
				idle, ok := names[strings.TrimPrefix(n, "/")]
				if !ok {
					continue
				}
				state := c.State
				if idle && state != "running" {
					state = "stopped"
				}
				counts[countKey{k.name, state}]++
				found++
			}
		}
		counts[countKey{k.name, "missing"}] += float64(len(names) - found)
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(descSandboxes, prometheus.GaugeValue, n, k.engine, k.state)
	}
}

func registerMetrics(reg *prometheus.Registry) error {
	if reg == nil {
		return nil
	}
	cs := []prometheus.Collector{metricCleanupDeleted, metricPreviewsLive, metricPreviewRequests, metricPreviewBytes,
		metricPersonCalls, metricIdleStops, metricEgressRefused, agentCollector{}, sandboxCollector{}, metricCheckpointBytes}
	cs = append(cs, mcptools.Collectors()...)
	for _, c := range append(cs, links.Collectors()...) {
		var already prometheus.AlreadyRegisteredError
		if err := reg.Register(c); err != nil && !errors.As(err, &already) {
			return fmt.Errorf("registering metrics: %w", err)
		}
	}
	return nil
}
