package mcpsandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/fleet"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// TestDescriptionsFollowConfig: through a real Caddy and the official TypeScript SDK,
// the execute description and the server instructions state the sandbox's limits, say
// it is offline exactly when it has no network, and list what is installed once it
// has been detected.
func TestDescriptionsFollowConfig(t *testing.T) {
	for _, tc := range []struct {
		network string
		offline bool
	}{{"none", true}, {"bridge", false}} {
		t.Run(tc.network, func(t *testing.T) {
			s := startSite(t, siteOptions{network: tc.network, directive: []string{"pids_limit 321"}})
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, "node", "testdata/ts-client/describe.mjs", s.url, s.key).Output()
			if err != nil {
				t.Fatalf("describe.mjs: %v\n%s", err, out)
			}
			var got struct {
				Instructions, ExecuteFirst, ExecuteLater, InstructionsLater, Error string
			}
			if err := json.Unmarshal(out, &got); err != nil || got.Error != "" {
				t.Fatalf("describe.mjs printed %s (%v)", out, err)
			}
			for name, text := range map[string]string{"instructions": got.Instructions, "execute description": got.ExecuteFirst} {
				if !strings.Contains(text, "1.0 GiB of memory") || !strings.Contains(text, "1 CPU") || !strings.Contains(text, "321 processes") {
					t.Errorf("%s does not state the limits: %q", name, text)
				}
				if strings.Contains(text, "offline") != tc.offline {
					t.Errorf("%s: says offline = %v, want %v: %q", name, !tc.offline, tc.offline, text)
				}
			}
			// The test image has bash and busybox only, and the detection says so.
			const base = "Installed: only the base system"
			if !strings.Contains(got.ExecuteLater, base) || !strings.Contains(got.InstructionsLater, base) {
				t.Errorf("installed tools never appeared:\nexecute: %q\ninstructions: %q", got.ExecuteLater, got.InstructionsLater)
			}
		})
	}
}

// TestDescriptionCapsCPUs: with cpus above the host's CPU count, the description says
// what the sandbox really gets, before and after the container exists, and the log
// warns once.
func TestDescriptionCapsCPUs(t *testing.T) {
	s := startSite(t, siteOptions{cpus: "64"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	info, err := s.docker.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(", %d CPUs and", info.NCPU)
	if info.NCPU == 1 {
		want = ", 1 CPU and"
	}
	c := s.client(ctx)
	describe := func() string {
		list, err := c.ListTools(ctx, mcp.ListToolsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tool := range list.Tools {
			if tool.Name == "execute" {
				return tool.Description
			}
		}
		return ""
	}
	if d := describe(); !strings.Contains(d, want) {
		t.Errorf("before the container exists, the description does not say %q: %q", want, d)
	}
	call(ctx, t, c, "execute", map[string]any{"command": "true"})
	call(ctx, t, c, "execute", map[string]any{"command": "true"})
	if d := describe(); !strings.Contains(d, want) {
		t.Errorf("the description does not say %q: %q", want, d)
	}
	log, _ := os.ReadFile(filepath.Join(s.storage, "caddy.log"))
	if n := strings.Count(string(log), "sandbox CPU limit is above the host's CPU count"); n != 1 {
		t.Errorf("the log warns %d times that cpus is above the host's CPU count, want once", n)
	}
}

// TestToolBoxCPUs: until the engine has been asked, a local engine's CPU count is this
// machine's, and a remote engine's is unknown, so cpus is stated as set.
func TestToolBoxCPUs(t *testing.T) {
	cli, err := client.NewClientWithOpts(client.WithHost("tcp://127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := sandbox.DefaultConfig()
	cfg.CPUs = 1000
	sb, err := sandbox.New(cli, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]float64{
		"unix:///var/run/docker.sock": float64(runtime.NumCPU()),
		"tcp://10.0.0.7:2376":         1000,
	} {
		if got := (toolBox{Sandbox: sb, e: fleet.NewEntry(fleet.EntryOptions{Sandbox: sb, Engine: fleet.Engine{Host: host}})}).CPUs(); got != want {
			t.Errorf("engine %s: CPUs() = %v, want %v", host, got, want)
		}
	}
}
