// Package metrics holds the plugin's Prometheus metrics that no single room owns:
// counts the root's wiring makes (cleanup, previews, calls per person, idle stops) and
// the collectors that read the pooled sandboxes when scraped. The tools and links
// layers keep their own (mcptools.Collectors, links.Collectors).
package metrics

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The counters live for the whole process, so counts survive config reloads; each
// config's registry gets them registered once.
var (
	// CleanupDeleted counts idle top-level entries of /sandbox the cleanup deleted.
	CleanupDeleted = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "cleanup_deleted_total",
		Help: "Idle top-level entries of /sandbox deleted by the cleanup.",
	})
	// PreviewRequests counts requests to preview hosts by result.
	PreviewRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "preview_requests_total",
		Help: "Requests to preview hosts, by result (ok, not_found, no_listener, unauthorized, error).",
	}, []string{"result"})
	// PreviewBytes counts response bytes sent through previews.
	PreviewBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "preview_bytes_total",
		Help: "Response bytes sent to people through previews (WebSocket traffic is not counted).",
	})
	// PersonCalls counts tool calls by the person whose sandbox they used ("-" for
	// the operator's).
	PersonCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "person_calls_total",
		Help: "Tool calls, by the person whose sandbox they used (- for the operator's).",
	}, []string{"person"})
	// IdleStops counts containers stopped after idle_stop.
	IdleStops = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "idle_stops_total",
		Help: "Sandbox containers stopped after idle_stop without use.",
	})
	// WarmTaken counts warm sandboxes (warm_sandboxes) taken by a person's first call.
	WarmTaken = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "warm_taken_total",
		Help: "Warm sandboxes (warm_sandboxes) taken by a new person's first call.",
	})
	// CheckpointBytes is the size of each person's checkpoints ("-" for the
	// operator's), as last listed.
	CheckpointBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "checkpoint_bytes",
		Help: "Bytes held by each person's sandbox checkpoints (images' own layers and copies of /sandbox), as last listed.",
	}, []string{"person"})
)

// Sandbox is one pooled sandbox as a scrape sees it.
type Sandbox struct {
	Engine       Engine // the engine its container is on
	Container    string
	IdleStopped  bool // stopped by this process for idleness
	AgentRunning bool // its commands run through the agent in its container
	AgentStarts  int  // agents it has started
	// KeptBytes is about the size of the processes a stop saved (keep_processes),
	// waiting for the next start; 0 when none are.
	KeptBytes int64
}

// Engine is a Docker engine as the sandboxes gauge asks it. Sandboxes whose engines
// have the same ID share one listing per scrape, whichever of their Engine values
// makes it.
type Engine interface {
	// Name is the engine's name, "" without engine lines.
	Name() string
	// ID tells engines apart: the same for every sandbox on one engine.
	ID() string
	// States gives the state (running, exited, created, ...) of the named containers
	// the engine holds; a name it does not hold is absent.
	States(ctx context.Context, names []string) (map[string]string, error)
}

// Collectors are the metrics of this package, with the pooled sandboxes read through
// pool and the live previews through previewsLive at each scrape.
func Collectors(pool func() []Sandbox, previewsLive func() int) []prometheus.Collector {
	live := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "previews_live",
		Help: "Ports exposed by expose_port that are live now, of those this Caddy made or served.",
	}, func() float64 { return float64(previewsLive()) })
	return []prometheus.Collector{CleanupDeleted, live, PreviewRequests, PreviewBytes, PersonCalls, IdleStops,
		CheckpointBytes, Agents(pool), Sandboxes(pool)}
}

// Warm reports the warm sandboxes (warm_sandboxes) ready to be taken
// (caddy_mcp_sandbox_warm_sandboxes) and the warm_taken_total counter, ready read at
// each scrape.
func Warm(ready func() int) []prometheus.Collector {
	g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "warm_sandboxes",
		Help: "Warm sandboxes (warm_sandboxes) made, started and ready for a new person's first call.",
	}, func() float64 { return float64(ready()) })
	return []prometheus.Collector{g, WarmTaken}
}

// Admission reports how commands queue for their engine host's processors (package
// sandbox admits a few at a time, first come, first served), stats read at each
// scrape: caddy_mcp_sandbox_commands_queued (waiting now),
// caddy_mcp_sandbox_commands_queued_total (those that waited) and
// caddy_mcp_sandbox_command_queue_seconds_total (the time they waited in all).
func Admission(stats func() (waiting, waited int64, waitedFor time.Duration)) []prometheus.Collector {
	queued := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "commands_queued",
		Help: "Commands waiting now for a place among those starting on their engine's host (a few per processor).",
	}, func() float64 { w, _, _ := stats(); return float64(w) })
	total := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "commands_queued_total",
		Help: "Commands that waited for a place among those starting on their engine's host.",
	}, func() float64 { _, n, _ := stats(); return float64(n) })
	secs := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "command_queue_seconds_total",
		Help: "Seconds commands waited in all for a place among those starting on their engine's host.",
	}, func() float64 { _, _, d := stats(); return d.Seconds() })
	return []prometheus.Collector{queued, total, secs}
}

// Agents reports, per sandbox container, whether its commands run through the agent
// inside it (caddy_mcp_sandbox_agent_running) and how many agents it has started
// (caddy_mcp_sandbox_agent_starts_total), from pool at each scrape.
func Agents(pool func() []Sandbox) prometheus.Collector { return agentCollector{pool} }

// Sandboxes counts the pooled sandboxes by engine and their container's state
// (caddy_mcp_sandbox_sandboxes), from pool at each scrape.
func Sandboxes(pool func() []Sandbox) prometheus.Collector { return sandboxCollector{pool} }

// Register registers cs with reg, keeping what an earlier config registered: the
// counters are the process's, so their counts carry on. A nil reg registers nothing.
func Register(reg *prometheus.Registry, cs ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	for _, c := range cs {
		var already prometheus.AlreadyRegisteredError
		if err := reg.Register(c); err != nil && !errors.As(err, &already) {
			return fmt.Errorf("registering metrics: %w", err)
		}
	}
	return nil
}

// agentCollector reports, per sandbox container, whether its commands run through the
// agent inside it and how many agents it has started. It reads the pooled sandboxes
// when scraped, so a sandbox counts while some config holds it.
type agentCollector struct{ pool func() []Sandbox }

var (
	descAgentRunning = prometheus.NewDesc(prometheus.BuildFQName("caddy", "mcp_sandbox", "agent_running"),
		"1 when the sandbox's commands run through the agent in its container, 0 on the fallback (one Docker exec per call).",
		[]string{"container"}, nil)
	descAgentStarts = prometheus.NewDesc(prometheus.BuildFQName("caddy", "mcp_sandbox", "agent_starts_total"),
		"Agents the sandbox has started in its container.",
		[]string{"container"}, nil)
	descKeptBytes = prometheus.NewDesc(prometheus.BuildFQName("caddy", "mcp_sandbox", "kept_processes_bytes"),
		"About the bytes of the processes a stop saved (keep_processes), until the next start restores them; 0 when none wait.",
		[]string{"container"}, nil)
)

func (agentCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descAgentRunning
	ch <- descAgentStarts
	ch <- descKeptBytes
}

func (c agentCollector) Collect(ch chan<- prometheus.Metric) {
	// A reload with new settings briefly holds two sandboxes of one container: they
	// are reported as one (running if either runs, their starts added).
	type agent struct {
		running bool
		starts  int
		kept    int64
	}
	byName := map[string]*agent{}
	for _, s := range c.pool() {
		a := byName[s.Container]
		if a == nil {
			a = &agent{}
			byName[s.Container] = a
		}
		a.running = a.running || s.AgentRunning
		a.starts += s.AgentStarts
		a.kept = max(a.kept, s.KeptBytes)
	}
	for name, a := range byName {
		v := 0.0
		if a.running {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descAgentRunning, prometheus.GaugeValue, v, name)
		ch <- prometheus.MustNewConstMetric(descAgentStarts, prometheus.CounterValue, float64(a.starts), name)
		ch <- prometheus.MustNewConstMetric(descKeptBytes, prometheus.GaugeValue, float64(a.kept), name)
	}
}

// sandboxCollector counts the pooled sandboxes (the operator's and every person's a
// config holds) by engine and by their container's state: running, exited, created,
// ..., missing (not created yet), stopped (for idleness; the next call starts it
// again), or unknown (the engine did not answer). It asks each engine once per scrape.
type sandboxCollector struct{ pool func() []Sandbox }

var descSandboxes = prometheus.NewDesc(prometheus.BuildFQName("caddy", "mcp_sandbox", "sandboxes"),
	"Sandboxes in use by the configuration, by engine (\"\" without engine lines) and the state of their container (stopped: for idleness; missing: not created yet).",
	[]string{"engine", "state"}, nil)

func (sandboxCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descSandboxes }

// listTimeout bounds one engine's answer to a scrape.
const listTimeout = 2 * time.Second

func (c sandboxCollector) Collect(ch chan<- prometheus.Metric) {
	engines := map[string]Engine{}           // ID -> one of its values, which lists
	byEngine := map[string]map[string]bool{} // ID -> container -> stopped for idleness
	for _, s := range c.pool() {
		id := s.Engine.ID()
		if byEngine[id] == nil {
			engines[id], byEngine[id] = s.Engine, map[string]bool{}
		}
		byEngine[id][s.Container] = byEngine[id][s.Container] || s.IdleStopped
	}
	type countKey struct{ engine, state string }
	counts := map[countKey]float64{}
	for id, names := range byEngine {
		eng := engines[id]
		list := make([]string, 0, len(names))
		for n := range names {
			list = append(list, n)
		}
		ctx, cancel := context.WithTimeout(context.Background(), listTimeout)
		states, err := eng.States(ctx, list)
		cancel()
		if err != nil {
			counts[countKey{eng.Name(), "unknown"}] += float64(len(names))
			continue
		}
		for n, idle := range names {
			state, ok := states[n]
			switch {
			case !ok:
				state = "missing"
			case idle && state != "running":
				state = "stopped"
			}
			counts[countKey{eng.Name(), state}]++
		}
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(descSandboxes, prometheus.GaugeValue, n, k.engine, k.state)
	}
}
