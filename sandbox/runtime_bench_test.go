package sandbox

import (
	"context"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testengine"
)

// BenchmarkRuntimes runs the same work in a sandbox under runc and one under gVisor,
// alternately so both see the same load, and reports each figure and the gVisor/runc
// ratio: execute("true") (and, under gVisor, its ratio to a raw Docker exec in the same
// container), a loop of 200 processes, a 100 MB write.
func BenchmarkRuntimes(b *testing.B) {
	cli := dockerClient(b)
	rt := testengine.GVisor(b, cli)
	boxes := map[string]*Sandbox{}
	for _, name := range []string{"runc", rt} {
		cfg := testConfig(b)
		cfg.Container += "-" + name
		cfg.Volume += "-" + name
		cfg.AgentSocketDir = b.TempDir()
		if name != "runc" {
			cfg.Runtime = name
		}
		boxes[name] = newTestSandbox(b, cli, cfg)
		if _, err := boxes[name].Exec(context.Background(), "true", boxapi.ExecOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	work := []struct{ name, command string }{
		{"execute", "true"},
		{"fork200", "i=0; while [ $i -lt 200 ]; do /bin/true; i=$((i+1)); done"},
		{"write100MB", "dd if=/dev/zero of=/sandbox/w bs=1M count=100 2>/dev/null; rm /sandbox/w"},
	}
	ctx := context.Background()
	took := map[string]time.Duration{}
	var raw time.Duration
	b.ResetTimer()
	for b.Loop() {
		for _, w := range work {
			for name, sb := range boxes {
				begin := time.Now()
				res, err := sb.Exec(ctx, w.command, boxapi.ExecOptions{})
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("%s under %s: %+v %v", w.name, name, res, err)
				}
				took[w.name+"/"+name] += time.Since(begin)
			}
		}
		begin := time.Now()
		if err := rawExec(ctx, cli, boxes[rt].cfg.Container); err != nil {
			b.Fatal(err)
		}
		raw += time.Since(begin)
	}
	n := float64(b.N)
	for _, w := range work {
		r, g := took[w.name+"/runc"], took[w.name+"/"+rt]
		b.ReportMetric(float64(r.Milliseconds())/n, w.name+"-runc-ms")
		b.ReportMetric(float64(g.Milliseconds())/n, w.name+"-gvisor-ms")
		b.ReportMetric(float64(g)/float64(r), w.name+"-gvisor/runc")
	}
	b.ReportMetric(float64(took["execute/"+rt])/float64(raw), "execute-gvisor/raw-exec")
}
