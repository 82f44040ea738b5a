package links

import "github.com/prometheus/client_golang/prometheus"

// Metrics live for the whole process, so counts survive config reloads; the root
// registers Collectors with each config's registry.
var (
	metricDownloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "downloads_total",
		Help: "Requests to download links, by result (ok, interrupted, expired, invalid, not_found, bad_range, busy, error).",
	}, []string{"result"})
	metricDownloadBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "download_bytes_total",
		Help: "Bytes sent through download links.",
	})
	metricUploads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "uploads_total",
		Help: "Requests to upload links that send a file or fail the link check, by result (ok, renamed, too_large, aborted, bad_name, not_dir, expired, invalid, revoked, error).",
	}, []string{"result"})
	metricUploadBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "mcp_sandbox", Name: "upload_bytes_total",
		Help: "Bytes of files saved through upload links.",
	})
)

// Collectors are the links' metrics.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{metricDownloads, metricDownloadBytes, metricUploads, metricUploadBytes}
}
