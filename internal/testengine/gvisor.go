package testengine

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/docker/docker/client"
)

// The gVisor tier. make test builds runsc and registers it with the machine's Docker
// engine (scripts/gvisor.sh) as the runtime GVisorRuntime, and sets GVisorEnv: the
// gVisor tests then fail rather than skip when the runtime is missing. A run without
// it (go test by hand) skips them on an engine without runsc, saying so.
const (
	// GVisorEnv, set to anything, makes the gVisor tests fail when the engine has no
	// runtime GVisorRuntime.
	GVisorEnv = "MCP_SANDBOX_GVISOR"
	// GVisorRuntime is the name scripts/gvisor.sh registers runsc under.
	GVisorRuntime = "runsc"
)

// GVisor returns the name of the local engine's gVisor runtime ([GVisorRuntime]),
// after checking that the engine has it with the arguments the plugin needs
// (--overlay2=none, --host-uds=open). It skips the test under -short, or when the
// runtime is missing and $MCP_SANDBOX_GVISOR is unset; otherwise a missing or
// misconfigured runtime fails it.
func GVisor(tb testing.TB, cli client.APIClient) string {
	tb.Helper()
	if testing.Short() {
		tb.Skip("needs gVisor's runsc registered with Docker (-short)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := cli.Info(ctx)
	if err != nil {
		tb.Fatalf("docker info: %v", err)
	}
	rt, ok := info.Runtimes[GVisorRuntime]
	switch {
	case !ok && os.Getenv(GVisorEnv) == "":
		tb.Skipf("needs gVisor: the Docker engine has no runtime %q and %s is unset (scripts/gvisor.sh builds and registers it; make test runs it and sets %s)",
			GVisorRuntime, GVisorEnv, GVisorEnv)
	case !ok:
		tb.Fatalf("%s is set but the Docker engine has no runtime %q: run scripts/gvisor.sh (make testenv does)", GVisorEnv, GVisorRuntime)
	case !slices.Contains(rt.Args, "--overlay2=none") || !slices.Contains(rt.Args, "--host-uds=open"):
		tb.Fatalf("the engine's runtime %q has arguments %q, not --overlay2=none and --host-uds=open: run scripts/gvisor.sh (docs/security.md)", GVisorRuntime, rt.Args)
	}
	return GVisorRuntime
}

// GVisorMemory is [GVisor] for the tests of processes kept across a stop: it also needs
// the engine's experimental features (docker checkpoint), which scripts/gvisor.sh
// turns on. Missing, they skip the test, or fail it when $MCP_SANDBOX_GVISOR is set.
func GVisorMemory(tb testing.TB, cli client.APIClient) string {
	tb.Helper()
	rt := GVisor(tb, cli)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := cli.Info(ctx)
	if err != nil {
		tb.Fatalf("docker info: %v", err)
	}
	if !info.ExperimentalBuild {
		if os.Getenv(GVisorEnv) == "" {
			tb.Skip("needs the Docker engine's experimental features (docker checkpoint): scripts/gvisor.sh turns them on")
		}
		tb.Fatalf("%s is set but the Docker engine runs without experimental features: run scripts/gvisor.sh (make testenv does)", GVisorEnv)
	}
	return rt
}
