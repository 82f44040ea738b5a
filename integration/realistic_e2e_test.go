package integration

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// debianImage is a realistic sandbox image (containers/build-debian-image.sh, built
// by make test): Debian 12 with python3, numpy, pandas, matplotlib, pytest, git, node.
const debianImage = "code-sandbox-debian:latest"

// tsCall is one call for testdata/ts-client/calls.mjs.
type tsCall struct {
	Tool   string         `json:"tool"`
	Args   map[string]any `json:"args,omitempty"`
	Follow bool           `json:"follow,omitempty"` // follow a running result with job_output
}

// tsCallResult is one call's result as the TypeScript SDK saw it.
type tsCallResult struct {
	Tool       string         `json:"tool"`
	MS         float64        `json:"ms"`
	End        float64        `json:"end"` // Unix milliseconds (elicit.mjs)
	Images     int            `json:"images"`
	IsError    bool           `json:"isError"`
	Error      string         `json:"error"`
	Text       string         `json:"text"`
	Structured map[string]any `json:"structured"`
}

// tsSession is what calls.mjs printed.
type tsSession struct {
	Instructions string `json:"instructions"`
	Tools        []struct {
		Name, Title, Description string
	} `json:"tools"`
	Results []tsCallResult `json:"results"`
	Error   string         `json:"error"`
}

// runTSCalls makes the calls in one session of the official TypeScript SDK.
func runTSCalls(t *testing.T, s *testsite.Site, calls ...tsCall) tsSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	in, _ := json.Marshal(calls)
	cmd := exec.CommandContext(ctx, "node", "testdata/ts-client/calls.mjs", s.URL, s.Key)
	cmd.Stdin = strings.NewReader(string(in))
	out, err := cmd.Output()
	var res tsSession
	if jerr := json.Unmarshal(out, &res); jerr != nil || res.Error != "" {
		t.Fatalf("TypeScript client (%v) printed %q: %v %s (run scripts/test-deps.sh if the SDK is missing)", err, out, jerr, res.Error)
	}
	if len(res.Results) < len(calls) {
		t.Fatalf("%d results for %d calls", len(res.Results), len(calls))
	}
	return res
}

// realisticSite is a site on the Debian image, offline.
func realisticSite(t *testing.T, opts testsite.Options) *testsite.Site {
	t.Helper()
	if testing.Short() {
		t.Skip("needs Docker, the Debian test image and the TypeScript SDK")
	}
	if err := exec.Command("docker", "image", "inspect", debianImage).Run(); err != nil {
		t.Fatalf("the image %s is missing: run containers/build-debian-image.sh (make test does)", debianImage)
	}
	opts.Image = debianImage
	return testsite.Start(t, opts)
}

// TestRealisticImageFirstSession: on a realistic image, a few seconds after Caddy
// starts, the first session is told which Python packages are installed; Python's
// output shows while a loop runs; git commit works at once.
func TestRealisticImageFirstSession(t *testing.T) {
	s := realisticSite(t, testsite.Options{Directive: []string{"yield_after 4s"}})
	time.Sleep(3 * time.Second)
	res := runTSCalls(t, s,
		tsCall{Tool: "execute", Args: map[string]any{"command": `python3 -c 'import time
for i in range(8):
    print("tick", i); time.sleep(1)'`}},
		tsCall{Tool: "execute", Args: map[string]any{"command": "cd /sandbox && rm -rf repo && mkdir repo && cd repo && git init -q && echo x > f && git add f && git commit -qm first && git log --format=%an"}},
	)
	for _, want := range []string{"python3 (", "numpy", "pandas", "git"} {
		if !strings.Contains(res.Instructions, want) {
			t.Errorf("the first session's instructions lack %q: %s", want, res.Instructions)
		}
	}
	loop := res.Results[0]
	if out, _ := loop.Structured["stdout"].(string); loop.Structured["running"] != true || !strings.Contains(out, "tick 2") {
		t.Errorf("after 4 s the Python loop showed %q (running %v): its output is buffered", out, loop.Structured["running"])
	}
	if c := res.Results[1]; c.IsError || c.Structured["exit_code"] != float64(0) || strings.TrimSpace(c.Structured["stdout"].(string)) == "" {
		t.Errorf("git commit in a fresh sandbox: %s", c.Text)
	}
}
