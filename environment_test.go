package mcpsandbox

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"
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
