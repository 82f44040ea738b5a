package mcpsandbox

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/fleet"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/links"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/mcptools"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/metrics"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/preview"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// registerMetrics registers every metric of the plugin with a config's registry: the
// tools', the links', egress refusals and internal/metrics' over the pooled sandboxes.
func registerMetrics(reg *prometheus.Registry) error {
	cs := metrics.Collectors(pooledSandboxes, func() int { return preview.Shared().Live() })
	cs = append(cs, metricEgressRefused)
	cs = append(cs, metrics.Warm(warmReady)...)
	cs = append(cs, metrics.Admission(sandbox.AdmissionStats)...)
	cs = append(cs, mcptools.Collectors()...)
	return metrics.Register(reg, append(cs, links.Collectors()...)...)
}

// pooledSandboxes is every pooled sandbox as a scrape sees it.
func pooledSandboxes() []metrics.Sandbox {
	var out []metrics.Sandbox
	sandboxes.Range(func(_, v any) bool {
		if e, ok := v.(*fleet.Entry); ok {
			sb := e.Sandbox()
			running, _ := sb.AgentStatus()
			_, kept := sb.Kept()
			out = append(out, metrics.Sandbox{
				Engine: engineStates{e.Client(), e.Engine()}, Container: sb.Config().Container,
				IdleStopped: e.IdleStopped(), AgentRunning: running, AgentStarts: sb.AgentStarts(), KeptBytes: kept,
			})
		}
		return true
	})
	return out
}

// engineStates is an engine as the sandboxes gauge asks it, through one sandbox's
// client.
type engineStates struct {
	cli sandbox.API
	eng fleet.Engine
}

func (e engineStates) Name() string { return e.eng.Name }

// ID is the engine's name, kind and address: a reload that moves the default engine
// to another Docker host lists both.
func (e engineStates) ID() string { return e.eng.Name + "\x00" + e.eng.Kind + "\x00" + e.eng.Host }

func (e engineStates) States(ctx context.Context, names []string) (map[string]string, error) {
	return sandbox.States(ctx, e.cli, names)
}

// warmReady is how many warm sandboxes the pooled warm pools hold ready.
func warmReady() int {
	n := 0
	sandboxes.Range(func(_, v any) bool {
		if p, ok := v.(*fleet.WarmPool); ok {
			n += p.Ready()
		}
		return true
	})
	return n
}
