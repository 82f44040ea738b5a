package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// TestEverydayTasks drives seven everyday tasks the way a model would, with the
// official TypeScript SDK and claude.ai's 60 s deadline, on the realistic image with no
// network, and reads each result as the model would. It writes the transcript of what
// the model saw to testdata/artifacts/everyday-tasks.txt.
func TestEverydayTasks(t *testing.T) {
	s := realisticSite(t, testsite.Options{Address: "http://:%d", Directive: []string{"yield_after 45s", "previews localhost"}})
	// With every tool on and a rich image's "Installed:" sentence, tools/list stays
	// under 20 KB.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s.Client(ctx)
	var list *mcp.ListToolsResult
	var listed []byte
	for range 60 { // tools/list does not wait for detection: ask until it is done
		var err error
		if list, err = c.ListTools(ctx, mcp.ListToolsRequest{}); err != nil {
			t.Fatal(err)
		}
		if listed, _ = json.Marshal(list); strings.Contains(string(listed), "Installed: python3 (") {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if len(list.Tools) != 15 || len(listed) >= 20_000 || !strings.Contains(string(listed), "Installed: python3 (") {
		t.Errorf("tools/list: %d tools, %d bytes (want 15 tools, under 20,000 bytes, naming what is installed)", len(list.Tools), len(listed))
	}
	t.Logf("tools/list: %d bytes", len(listed))
	var transcript strings.Builder
	session := func(name string, calls ...tsCall) []tsCallResult {
		t.Helper()
		res := runTSCalls(t, s, calls...)
		fmt.Fprintf(&transcript, "=== %s\n", name)
		for _, r := range res.Results {
			fmt.Fprintf(&transcript, "--- %s (%.1fs, error %v, images %d)\n%s\n", r.Tool, r.MS/1000, r.IsError || r.Error != "", r.Images, r.Text+r.Error)
			if r.Error != "" {
				t.Errorf("%s: %s failed in the client: %s", name, r.Tool, r.Error)
			}
			if r.MS > 60_000 {
				t.Errorf("%s: %s took %.0f s, past claude.ai's deadline", name, r.Tool, r.MS/1000)
			}
		}
		return res.Results
	}
	defer func() {
		dir := filepath.Join("testdata", "artifacts")
		_ = os.MkdirAll(dir, 0o755)
		_ = os.WriteFile(filepath.Join(dir, "everyday-tasks.txt"), []byte(transcript.String()), 0o644)
	}()
	stdout := func(r tsCallResult) string { s, _ := r.Structured["stdout"].(string); return s }
	exit := func(r tsCallResult) any { return r.Structured["exit_code"] }

	// 1. A CSV becomes a chart the model looks at and shares.
	r := session("csv to chart",
		tsCall{Tool: "write_file", Args: map[string]any{"path": "sales.csv", "content": "month,sales\nJan,10\nFeb,14\nMar,9\nApr,17\n"}},
		tsCall{Tool: "execute", Args: map[string]any{"command": `python3 -c "
import pandas as pd, matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt
d = pd.read_csv('sales.csv'); d.plot(x='month', y='sales', kind='bar'); plt.savefig('chart.png')
print(d['sales'].sum())"`}},
		tsCall{Tool: "read_file", Args: map[string]any{"path": "chart.png"}},
		tsCall{Tool: "share_file", Args: map[string]any{"path": "chart.png"}},
	)
	if r[0].IsError || stdout(r[1]) != "50\n" || r[2].Images != 1 || r[3].IsError || !strings.Contains(r[3].Text, "chart.png") {
		t.Errorf("csv to chart: %q / %q / %d images / %q", r[0].Text, r[1].Text, r[2].Images, r[3].Text)
	}

	// 2. A module with tests holding quotes, backticks and $; one test fixed.
	r = session("pytest",
		tsCall{Tool: "write_file", Args: map[string]any{"path": "proj/quote.py", "content": "def quote(s):\n    return \"'\" + s + \"'\"\n\ndef price(n):\n    return f\"${n}\"\n"}},
		tsCall{Tool: "write_file", Args: map[string]any{"path": "proj/test_quote.py", "content": "from quote import quote, price\n\ndef test_quote():\n    assert quote('`ls`') == \"'`ls`'\"\n\ndef test_price():\n    assert price(5) == '$5.00'\n"}},
		tsCall{Tool: "execute", Args: map[string]any{"command": "python3 -m pytest -q", "cwd": "proj"}},
		tsCall{Tool: "edit_file", Args: map[string]any{"path": "proj/quote.py", "old_text": `return f"${n}"`, "new_text": `return f"${n:.2f}"`}},
		tsCall{Tool: "execute", Args: map[string]any{"command": "python3 -m pytest -q", "cwd": "proj"}},
	)
	if exit(r[2]) != float64(1) || !strings.Contains(stdout(r[2]), "1 failed, 1 passed") || r[3].IsError || exit(r[4]) != float64(0) || !strings.Contains(stdout(r[4]), "2 passed") {
		t.Errorf("pytest: %q / %q / %q", r[2].Text, r[3].Text, r[4].Text)
	}

	// 3. A 2-minute simulation printing progress, followed to its end.
	r = session("simulation",
		tsCall{Tool: "execute", Follow: true, Args: map[string]any{"command": `python3 -c "
import time
for i in range(1, 25):
    time.sleep(5); print(f'step {i}/24, energy {1000 - i * 7.5:.1f}')"`}},
	)
	last := r[len(r)-1]
	var all strings.Builder
	for _, x := range r {
		all.WriteString(stdout(x))
	}
	if len(r) < 2 || len(r) > 4 || exit(last) != float64(0) || strings.Count(all.String(), "step ") != 24 || !strings.Contains(last.Text, "ran 2m") {
		t.Errorf("simulation: %d calls, last %q, %d steps", len(r), last.Text, strings.Count(all.String(), "step "))
	}
	if out := stdout(r[0]); !strings.Contains(out, "step 8/24") {
		t.Errorf("after 45 s the simulation showed %q", out)
	}

	// 4. Rare lines in a 50 MB log, and a large grep result.
	r = session("big log",
		tsCall{Tool: "execute", Args: map[string]any{"command": `python3 -c "
import random
random.seed(1)
with open('app.log', 'w') as f:
    for i in range(700000):
        f.write(f'2026-12-01 INFO request {i} took {random.randint(1, 90)} ms from 10.0.{i % 250}.{i % 199}\n')
        if i % 100000 == 99999: f.write(f'2026-12-01 ERROR worker crashed at request {i}\n')
" && ls -la app.log | awk '{print $5}'`}},
		tsCall{Tool: "execute", Args: map[string]any{"command": "grep -n ERROR app.log"}},
		tsCall{Tool: "execute", Args: map[string]any{"command": "grep 'took 7 ms' app.log"}},
	)
	if exit(r[0]) != float64(0) || strings.Count(stdout(r[1]), "ERROR") != 7 {
		t.Errorf("rare lines: %q / %q", r[0].Text, r[1].Text)
	}
	big := stdout(r[2])
	m := regexp.MustCompile(`read_file path=(\S+) offset=(\d+)`).FindStringSubmatch(big)
	if len(big) > 31_000 || m == nil {
		t.Fatalf("a large grep result: %d bytes, marker %v", len(big), m)
	}
	r = session("big log, the rest", tsCall{Tool: "read_file", Args: map[string]any{"path": m[1], "offset": m[2], "limit": 5}})
	if r[0].IsError || !strings.Contains(r[0].Text, "took 7 ms") {
		t.Errorf("the read_file call the marker names: %q", r[0].Text)
	}

	// 5. A small web app shown through expose_port.
	r = session("web app",
		tsCall{Tool: "write_file", Args: map[string]any{"path": "web/app.py", "content": "from http.server import BaseHTTPRequestHandler, HTTPServer\n\nclass H(BaseHTTPRequestHandler):\n    def do_GET(self):\n        self.send_response(200)\n        self.end_headers()\n        self.wfile.write(b'hello from the app')\n\nHTTPServer(('0.0.0.0', 8000), H).serve_forever()\n"}},
		tsCall{Tool: "execute", Args: map[string]any{"command": "cd web && (setsid nohup python3 app.py > app.log 2>&1 &) && sleep 1 && echo started"}},
		tsCall{Tool: "expose_port", Args: map[string]any{"port": 8000}},
	)
	url, _ := r[2].Structured["url"].(string)
	if r[1].IsError || r[2].Structured["listening"] != true || url == "" {
		t.Errorf("web app: %q / %q", r[1].Text, r[2].Text)
	} else if body := fetchVia(t, s, url); body != "hello from the app" {
		t.Errorf("the preview %s showed %q", url, body)
	}

	// 6. The error cases a model meets.
	r = session("errors",
		tsCall{Tool: "execute", Args: map[string]any{"command": "pandoc --version"}},
		tsCall{Tool: "execute", Args: map[string]any{"command": "python3 -c 'print(1'"}},
		tsCall{Tool: "execute", Args: map[string]any{"command": "sleep 30", "timeout": 2}},
		tsCall{Tool: "read_file", Args: map[string]any{"path": "nope.txt"}},
		tsCall{Tool: "execute", Args: map[string]any{"command": "ls", "dir": "/tmp"}},
		tsCall{Tool: "execute", Args: map[string]any{"command": "pip install requests 2>&1 | tail -2; python3 -m pip --version"}},
	)
	for i, want := range []string{"exit code 127", "SyntaxError", "timed out after 2s", "does not exist", `does not take the argument "dir"`, ""} {
		if want != "" && !strings.Contains(r[i].Text, want) {
			t.Errorf("error case %d: %q, want %q", i, r[i].Text, want)
		}
	}
	if !strings.Contains(r[0].Text, "command not found") {
		t.Errorf("command not found: %q", r[0].Text)
	}

	// 7. git, sqlite and a node script.
	r = session("git sqlite node",
		tsCall{Tool: "execute", Args: map[string]any{"command": "rm -rf repo && mkdir repo && cd repo && git init -q && echo one > a && git add a && git commit -qm one && echo two >> a && git diff --stat && git commit -qam two && git log --oneline | wc -l"}},
		tsCall{Tool: "execute", Args: map[string]any{"command": `sqlite3 db.sqlite "create table if not exists t(x); insert into t values (1),(2),(3); select sum(x) from t;"`}},
		tsCall{Tool: "write_file", Args: map[string]any{"path": "hello.js", "content": "const xs = [1, 2, 3];\nconsole.log(`sum ${xs.reduce((a, b) => a + b)}`);\n"}},
		tsCall{Tool: "execute", Args: map[string]any{"command": "node hello.js"}},
	)
	if !strings.HasSuffix(stdout(r[0]), "2\n") || !strings.HasSuffix(stdout(r[1]), "6\n") || stdout(r[3]) != "sum 6\n" {
		t.Errorf("git, sqlite, node: %q / %q / %q", r[0].Text, r[1].Text, r[3].Text)
	}
}

// fetchVia gets a URL of the site (a preview host included) through its loopback port.
func fetchVia(t *testing.T, s *testsite.Site, url string) string {
	t.Helper()
	dialer := &net.Dialer{}
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, fmt.Sprintf("127.0.0.1:%d", s.Port))
		},
	}}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return string(b)
}
