package mcpsandbox

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/links"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/preview"
)

// Metrics live for the whole process, so counts survive config reloads; each config's
// registry gets them registered once.
var (
	metricExecutions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "executions_total",
		Help: "Commands run by the execute tool, by outcome (ok, nonzero, timeout, cancelled, error).",
	}, []string{"outcome"})
	metricDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "execution_duration_seconds",
		Help:    "How long commands run.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600},
	})
	metricRunning = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "executions_running",
		Help: "Commands running now.",
	})
	metricShares = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "shared_files_total",
		Help: "Download links made by share_file.",
	})
	metricUploadLinks = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "upload_links_total",
		Help: "Upload links made by upload_link.",
	})
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
	for _, c := range append([]prometheus.Collector{metricExecutions, metricDuration, metricRunning, metricShares,
		metricCleanupDeleted, metricUploadLinks,
		metricPreviewsLive, metricPreviewRequests, metricPreviewBytes}, links.Collectors()...) {
		var already prometheus.AlreadyRegisteredError
		if err := reg.Register(c); err != nil && !errors.As(err, &already) {
			return fmt.Errorf("registering metrics: %w", err)
		}
	}
	return nil
}
