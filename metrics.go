package mcpsandbox

import (
	"errors"
	"fmt"

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
	metricPreviewBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "preview_bytes_total",
		Help: "Response bytes sent to people through previews (WebSocket traffic is not counted).",
	})
)

func registerMetrics(reg *prometheus.Registry) error {
	if reg == nil {
		return nil
	}
	cs := []prometheus.Collector{metricCleanupDeleted, metricPreviewsLive, metricPreviewRequests, metricPreviewBytes}
	cs = append(cs, mcptools.Collectors()...)
	for _, c := range append(cs, links.Collectors()...) {
		var already prometheus.AlreadyRegisteredError
		if err := reg.Register(c); err != nil && !errors.As(err, &already) {
			return fmt.Errorf("registering metrics: %w", err)
		}
	}
	return nil
}
