package mcptools

import "github.com/prometheus/client_golang/prometheus"

// Metrics live for the whole process, so counts survive config reloads; the root
// registers Collectors with each config's registry.
var (
	metricExecutions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "executions_total",
		Help: "Commands run by the execute tool, by outcome (ok, nonzero, timeout, cancelled, error, refused: ended well but refused hosts by egress, running: still running when the call returned).",
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
)

// Collectors are the tools' metrics.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{metricExecutions, metricDuration, metricRunning, metricShares, metricUploadLinks}
}
