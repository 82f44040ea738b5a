package sandbox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testengine"
)

// TestRuntimeFacts: a gVisor runtime is known by its name or binary, and each of the two
// arguments the plugin needs is looked for in the forms runsc takes; runc has no
// problem to report.
func TestRuntimeFacts(t *testing.T) {
	info := boxapi.EngineInfo{DefaultRuntime: "runc", Runtimes: map[string]boxapi.RuntimeInfo{
		"runc":       {Path: "runc"},
		"runsc":      {Path: "/usr/local/bin/runsc", Args: []string{"--overlay2=none", "--host-uds=open"}},
		"bare":       {Path: "/usr/local/bin/runsc"},
		"spaced":     {Path: "/opt/runsc", Args: []string{"-overlay2", "none", "--host-uds", "all"}},
		"overlaid":   {Path: "/usr/bin/runsc", Args: []string{"--overlay2=root:self", "--host-uds=open"}},
		"kata":       {Path: "/usr/bin/kata-runtime"},
		"gvisor-kvm": {},
	}}
	for _, c := range []struct {
		name           string
		gvisor         bool
		commit, socket bool // the problem is reported
	}{
		{"", false, false, false}, // the default: runc
		{"runc", false, false, false},
		{"runsc", true, false, false},
		{"bare", true, true, true},
		{"spaced", true, false, false},
		{"overlaid", true, true, false},
		{"kata", false, false, false},
		{"gvisor-kvm", true, true, true},
	} {
		r := factsOf(info, c.name)
		if r.gvisor != c.gvisor || (r.noCommit() != "") != c.commit || (r.noHostSocket() != "") != c.socket {
			t.Errorf("runtime %q: gvisor %v, no commit %q, no socket %q; want %v %v %v", c.name, r.gvisor, r.noCommit(), r.noHostSocket(), c.gvisor, c.commit, c.socket)
		}
	}
	if r := factsOf(info, ""); r.name != "runc" {
		t.Errorf("no runtime named: %q, want the engine's default", r.name)
	}
	p := factsOf(info, "bare").problem()
	for _, want := range []string{`runtime bare (gVisor)`, `"--overlay2=none"`, `"--host-uds=open"`, "daemon.json", "SIGHUP", "docs/security.md"} {
		if !strings.Contains(p, want) {
			t.Errorf("the problem does not say %q: %s", want, p)
		}
	}
}

// TestRuntimeMissing: a runtime the engine does not have is an error naming it and the
// engine's runtimes, returned within seconds and before any container is made, logged
// once however often it is met.
func TestRuntimeMissing(t *testing.T) {
	cli := dockerClient(t)
	cfg := testConfig(t)
	cfg.Runtime = "nosuch"
	core, logs := observer.New(zapcore.InfoLevel)
	sb, err := New(cli, cfg, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeSandbox(t, cli, cfg) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	info, err := cli.EngineInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		begin := time.Now()
		_, err := sb.Exec(ctx, "true", boxapi.ExecOptions{})
		if took := time.Since(begin); took > 5*time.Second {
			t.Errorf("call %d: the error took %v", i, took)
		}
		if !errors.Is(err, boxapi.ErrRuntimeMissing) {
			t.Fatalf("call %d: %v, want ErrRuntimeMissing", i, err)
		}
		for _, want := range []string{`the Docker engine has no runtime "nosuch"; its runtimes are `, "runc", "register it in daemon.json (docs/security.md) or change `runtime`"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the error does not say %q: %v", want, err)
			}
		}
		if strings.Contains(err.Error(), "io.containerd.") {
			t.Errorf("the error names Docker's aliases of runc: %v", err)
		}
		if _, ok := info.Runtimes[testengine.GVisorRuntime]; ok && !strings.Contains(err.Error(), testengine.GVisorRuntime) {
			t.Errorf("the engine has %s but the error does not name it: %v", testengine.GVisorRuntime, err)
		}
		sb.life.invalidate()
	}
	if n := logs.FilterMessage("the sandbox container cannot be made").Len(); n != 1 {
		t.Errorf("logged %d times, want once", n)
	}
	if _, err := cli.ContainerInspect(ctx, cfg.Container); err == nil {
		t.Error("a container was made")
	}
}

// TestRuntimeContainer: the configured runtime is the container's, and what the
// Sandbox reports; under gVisor the kernel is gVisor's and the registered runtime's
// configuration has nothing to report.
func TestRuntimeContainer(t *testing.T) {
	cli := dockerClient(t)
	rt := testengine.GVisor(t, cli)
	cfg := testConfig(t)
	cfg.Runtime = rt
	cfg.AgentSocketDir = t.TempDir()
	sb := newTestSandbox(t, cli, cfg)
	if r := sb.Runtime(); r.Name != rt || !r.GVisor {
		t.Errorf("before the container is made: %+v", r)
	}
	res := mustExec(t, sb, "uname -r", boxapi.ExecOptions{})
	if !strings.Contains(res.Stdout, "gvisor") {
		t.Errorf("uname -r under %s: %q", rt, res.Stdout)
	}
	info, err := cli.ContainerInspect(context.Background(), cfg.Container)
	if err != nil {
		t.Fatal(err)
	}
	if info.HostConfig.Runtime != rt {
		t.Errorf("the container's runtime is %q, want %q", info.HostConfig.Runtime, rt)
	}
	if r := sb.Runtime(); r.Name != rt || !r.GVisor || r.Problem != "" {
		t.Errorf("the sandbox's runtime: %+v", r)
	}
	if on, why := sb.AgentDirect(); !on && !cfg.NoAgent {
		t.Errorf("the direct channel is off under %s: %s", rt, why)
	}
}

// argsHidden is an engine that reports its gVisor runtime without arguments, as an
// engine whose daemon.json registers runsc plainly does. Its address differs from the
// real engine's (a fragment added), so that what is kept of each engine stays apart.
type argsHidden struct{ dockerEngine }

func (a argsHidden) DaemonHost() string { return a.dockerEngine.DaemonHost() + "#args-hidden" }

func (a argsHidden) EngineInfo(ctx context.Context) (boxapi.EngineInfo, error) {
	info, err := a.dockerEngine.EngineInfo(ctx)
	if rt, ok := info.Runtimes[testengine.GVisorRuntime]; ok {
		rt.Args = nil
		info.Runtimes[testengine.GVisorRuntime] = rt
	}
	return info, err
}

// TestRuntimeMisconfigured: under a gVisor runtime registered without --overlay2=none
// and --host-uds=open, the sandbox says so once in the log and in its runtime's
// problem, with the fix; the direct channel is off for that reason, and a checkpoint is
// refused rather than saved empty.
func TestRuntimeMisconfigured(t *testing.T) {
	real := dockerClient(t)
	rt := testengine.GVisor(t, real)
	cfg := testConfig(t)
	cfg.Runtime = rt
	cfg.AgentSocketDir = t.TempDir()
	core, logs := observer.New(zapcore.InfoLevel)
	sb, err := New(argsHidden{real}, cfg, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.CloseTransfers(); removeSandbox(t, real, cfg) })
	mustExec(t, sb, "echo x > /opt/x", boxapi.ExecOptions{})
	sb.life.invalidate()
	mustExec(t, sb, "true", boxapi.ExecOptions{})
	p := sb.Runtime().Problem
	for _, want := range []string{"--overlay2=none", "--host-uds=open", "daemon.json"} {
		if !strings.Contains(p, want) {
			t.Errorf("the runtime's problem does not say %q: %q", want, p)
		}
	}
	if n := logs.FilterMessage("the sandbox's container runtime is configured so that some features do not work").Len(); n != 1 {
		t.Errorf("the problem was logged %d times, want once", n)
	}
	if !cfg.NoAgent {
		if on, why := sb.AgentDirect(); on || !strings.Contains(why, "--host-uds=open") {
			t.Errorf("the direct channel: on %v, why %q", on, why)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = sb.Checkpoint(ctx, "empty", 5)
	if !errors.Is(err, boxapi.ErrCheckpointEmpty) || !strings.Contains(err.Error(), "--overlay2=none") {
		t.Fatalf("checkpoint: %v, want ErrCheckpointEmpty naming --overlay2=none", err)
	}
	if list, err := sb.Checkpoints(ctx); err != nil || len(list) != 0 {
		t.Errorf("checkpoints after the refusal: %v %v", list, err)
	}
}

// TestNoKeep: processes are kept across a stop only by gVisor on an engine that can
// save memory with its experimental features on; each other case says what to do.
func TestNoKeep(t *testing.T) {
	info := boxapi.EngineInfo{DefaultRuntime: "runc", Runtimes: map[string]boxapi.RuntimeInfo{
		"runc":  {Path: "runc"},
		"runsc": {Path: "/usr/local/bin/runsc", Args: []string{"--overlay2=none", "--host-uds=open"}},
	}}
	docker := dummyClient(t)
	var kube struct{ API }
	for _, c := range []struct {
		runtime      string
		engine       API
		experimental bool
		want         string // in the reason; "" for none
	}{
		{"runsc", docker, true, ""},
		{"runsc", docker, false, `"experimental": true`},
		{"", docker, true, "the runtime runc cannot save a container's memory; use gVisor's runsc"},
		{"runsc", kube, true, "a Kubernetes engine cannot"},
	} {
		why := noKeep(factsOf(info, c.runtime), c.engine, c.experimental)
		if (c.want == "") != (why == "") || !strings.Contains(why, c.want) {
			t.Errorf("runtime %q, experimental %v: %q, want %q", c.runtime, c.experimental, why, c.want)
		}
	}
}
