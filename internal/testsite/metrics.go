package testsite

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// MetricsRoute is a line for [Options.Site] that serves Caddy's Prometheus metrics,
// the plugin's among them, on /metrics of the site.
const MetricsRoute = "handle /metrics {\n\t\tmetrics\n\t}"

// Metrics fetches the metrics a site with [MetricsRoute] serves on base+"/metrics",
// through c (nil: http.DefaultClient), in Prometheus's text format.
func Metrics(t testing.TB, c *http.Client, base string) string {
	t.Helper()
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("fetching metrics: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("fetching metrics: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

// MetricSum adds up the samples of the metric name, in metrics as [Metrics] returns
// them, whose labels include all of labels; found is false when none matches.
func MetricSum(metrics, name string, labels map[string]string) (sum float64, found bool) {
	for _, line := range strings.Split(metrics, "\n") {
		if !strings.HasPrefix(line, name) || strings.HasPrefix(line, "#") {
			continue
		}
		rest := line[len(name):]
		var have map[string]string
		if strings.HasPrefix(rest, "{") {
			end := strings.LastIndex(rest, "}")
			if end < 0 {
				continue
			}
			have = parseLabels(rest[1:end])
			rest = rest[end+1:]
		}
		if !strings.HasPrefix(rest, " ") {
			continue // another metric whose name begins with name
		}
		matches := true
		for k, v := range labels {
			if got, ok := have[k]; !ok || got != v {
				matches = false
			}
		}
		if !matches {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
		if err != nil {
			continue
		}
		sum += v
		found = true
	}
	return sum, found
}

// parseLabels reads `a="x",b="y"` as the text format writes it (\\, \" and \n escaped).
func parseLabels(s string) map[string]string {
	m := map[string]string{}
	for s != "" {
		eq := strings.Index(s, `="`)
		if eq < 0 {
			return m
		}
		key := strings.TrimLeft(s[:eq], ",")
		s = s[eq+2:]
		var v strings.Builder
		i := 0
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					v.WriteByte('\n')
				default:
					v.WriteByte(s[i])
				}
				continue
			}
			v.WriteByte(s[i])
		}
		m[key] = v.String()
		if i >= len(s) {
			return m
		}
		s = s[i+1:]
	}
	return m
}
