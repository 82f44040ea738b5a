package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// TestAgentInConsoleAndMetrics: once a command has run, the console's API and overview
// page say the agent runs, and Caddy's metrics handler reports it for the container
// with at least one start.
func TestAgentInConsoleAndMetrics(t *testing.T) {
	s := testsite.Start(t, testsite.Options{Site: []string{"handle /metrics {\n\t\tmetrics\n\t}"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.Client(ctx)
	if st := testsite.Structured(t, testsite.Call(ctx, t, c, "execute", map[string]any{"command": "echo hi"})); st["stdout"] != "hi\n" {
		t.Fatalf("execute: %v", st)
	}

	var status struct {
		Agent struct {
			Running bool   `json:"running"`
			Reason  string `json:"reason"`
		} `json:"agent"`
	}
	if code := apiCall(t, s, "GET", "/sandbox", &status); code != 200 || !status.Agent.Running || status.Agent.Reason != "" {
		t.Fatalf("GET /console/api/sandbox: %d %+v", code, status)
	}
	u := newConsoleUser(t, s.URL)
	u.do("POST", "/console/signin", map[string][]string{"api_key": {s.Key}}, nil)
	if _, page := u.do("GET", "/console", nil, nil); !strings.Contains(page, "<dt>Agent</dt><dd>running ") {
		t.Fatalf("overview without the agent running: %.3000s", page)
	}

	resp, err := http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	metrics := string(b)
	if want := fmt.Sprintf("caddy_mcp_sandbox_agent_running{container=%q} 1\n", s.Container); !strings.Contains(metrics, want) {
		t.Fatalf("no %q in /metrics: %d\n%s", want, resp.StatusCode, grepLines(metrics, "agent"))
	}
	m := regexp.MustCompile(`caddy_mcp_sandbox_agent_starts_total\{container="` + regexp.QuoteMeta(s.Container) + `"\} (\d+)\n`).FindStringSubmatch(metrics)
	if m == nil {
		t.Fatalf("no agent starts in /metrics:\n%s", grepLines(metrics, "agent"))
	}
	if n, _ := strconv.Atoi(m[1]); n < 1 {
		t.Fatalf("agent starts: %s", m[1])
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
