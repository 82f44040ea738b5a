package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
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
			s := testsite.Start(t, testsite.Options{Network: tc.network, Directive: []string{"pids_limit 321"}})
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, "node", "testdata/ts-client/describe.mjs", s.URL, s.Key).Output()
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
	s := testsite.Start(t, testsite.Options{CPUs: "64"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	info, err := s.Docker.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(", %d CPUs and", info.NCPU)
	if info.NCPU == 1 {
		want = ", 1 CPU and"
	}
	c := s.Client(ctx)
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
	testsite.Call(ctx, t, c, "execute", map[string]any{"command": "true"})
	testsite.Call(ctx, t, c, "execute", map[string]any{"command": "true"})
	if d := describe(); !strings.Contains(d, want) {
		t.Errorf("the description does not say %q: %q", want, d)
	}
	log, _ := os.ReadFile(filepath.Join(s.Storage, "caddy.log"))
	if n := strings.Count(string(log), "sandbox CPU limit is above the host's CPU count"); n != 1 {
		t.Errorf("the log warns %d times that cpus is above the host's CPU count, want once", n)
	}
}
