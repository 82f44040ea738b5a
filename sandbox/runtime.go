package sandbox

import (
	"context"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// The container runtime (Config.Runtime, Docker's HostConfig.Runtime) is what stands
// between the sandbox's root and the host's kernel: runc, the default, puts the
// container's processes on the host's kernel behind namespaces, cgroups and seccomp;
// gVisor's runsc gives them a kernel of its own in user space. The engine knows its
// runtimes by name (daemon.json's "runtimes"); a name it does not know is refused
// before the container is made, with the names it does know.

// validRuntime is what a runtime name may look like: Docker's names are keys of
// daemon.json, Kubernetes' RuntimeClass names DNS subdomains.
var validRuntime = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,252}$`)

// runtimeFacts are what the engine says of the runtime a container runs under.
type runtimeFacts struct {
	name   string   // the runtime's name; the engine's default when the container names none
	path   string   // its binary, as the engine reports it ("" when not reported)
	args   []string // the arguments the engine gives it (daemon.json's runtimeArgs)
	known  bool     // the engine reported its runtimes and this one is among them
	gvisor bool
}

// isGVisor reports whether a runtime of this name and binary is gVisor's runsc.
func isGVisor(name, binary string) bool {
	n := strings.ToLower(name)
	return strings.Contains(n, "runsc") || strings.Contains(n, "gvisor") || strings.HasPrefix(path.Base(binary), "runsc")
}

// hasArg reports whether args set runsc's flag to value, in any of the forms runsc
// accepts (--flag=value, -flag=value, --flag value).
func hasArg(args []string, flag, value string) bool {
	for i, a := range args {
		a = "-" + strings.TrimLeft(a, "-")
		switch {
		case a == "-"+flag+"="+value:
			return true
		case a == "-"+flag && i+1 < len(args) && args[i+1] == value:
			return true
		}
	}
	return false
}

// noCommit is why a checkpoint of a container under this runtime would be empty, ""
// when it would not: runsc keeps the root filesystem's writes in an overlay of its own
// (its --overlay2 default) that docker commit does not see.
func (r runtimeFacts) noCommit() string {
	if !r.gvisor || hasArg(r.args, "overlay2", "none") {
		return ""
	}
	return fmt.Sprintf("the runtime %s (gVisor) runs without --overlay2=none, so it keeps the container's writes where Docker's commit does not see them and a checkpoint would be empty; "+
		"add \"--overlay2=none\" to its runtimeArgs in the engine's daemon.json and send dockerd SIGHUP (docs/security.md), then recreate the sandbox", r.name)
}

// noHostSocket is why the agent cannot dial the direct channel's socket under this
// runtime, "" when it can: gVisor opens a host's Unix socket through a bind mount only
// with --host-uds=open (or all).
func (r runtimeFacts) noHostSocket() string {
	if !r.gvisor || hasArg(r.args, "host-uds", "open") || hasArg(r.args, "host-uds", "all") {
		return ""
	}
	return fmt.Sprintf("the runtime %s (gVisor) runs without --host-uds=open, so the agent cannot dial a socket shared from the host; "+
		"add \"--host-uds=open\" to its runtimeArgs in the engine's daemon.json and send dockerd SIGHUP (docs/security.md)", r.name)
}

// problem is what is wrong with the runtime's configuration for the sandbox, with the
// fixes, "" when nothing is.
func (r runtimeFacts) problem() string {
	var p []string
	for _, why := range []string{r.noCommit(), r.noHostSocket()} {
		if why != "" {
			p = append(p, why)
		}
	}
	return strings.Join(p, "; ")
}

// factsOf are the facts of the runtime named name ("" the engine's default) from the
// engine's info.
func factsOf(info boxapi.EngineInfo, name string) runtimeFacts {
	if name == "" {
		name = info.DefaultRuntime
	}
	r := runtimeFacts{name: name}
	if rt, ok := info.Runtimes[name]; ok {
		r.known, r.path, r.args = true, rt.Path, slices.Clone(rt.Args)
	}
	r.gvisor = isGVisor(r.name, r.path)
	return r
}

// runtimeMissing is the error for a runtime the engine does not have, naming the ones
// it has (Docker's io.containerd.* aliases of runc left out).
func runtimeMissing(name string, info boxapi.EngineInfo) error {
	var have []string
	for n := range info.Runtimes {
		if !strings.HasPrefix(n, "io.containerd.") {
			have = append(have, n)
		}
	}
	slices.Sort(have)
	return fmt.Errorf("%w: the Docker engine has no runtime %q; its runtimes are %s; register it in daemon.json (docs/security.md) or change `runtime`",
		boxapi.ErrRuntimeMissing, name, strings.Join(have, ", "))
}

// checkRuntime reports the configured runtime the engine does not have (logged once
// per name), before a container is made with it. An engine that reports no runtimes
// (a Kubernetes engine) is not checked: it says so when the pod is made.
func (s *lifecycle) checkRuntime(info boxapi.EngineInfo) error {
	name := s.cfg.Runtime
	if name == "" || len(info.Runtimes) == 0 {
		return nil
	}
	if _, ok := info.Runtimes[name]; ok {
		return nil
	}
	err := runtimeMissing(name, info)
	if s.firstTime(&s.warnedRuntime, name) {
		s.log.Error("the sandbox container cannot be made", zap.String("runtime", name), zap.Error(err))
	}
	return err
}

// runtimeRefused maps the engine's refusal of an unknown runtime at create time (a
// runtime removed since the engine was asked) to the same error as checkRuntime's.
func (s *lifecycle) runtimeRefused(err error) error {
	if s.cfg.Runtime == "" || !strings.Contains(err.Error(), "runtime") || !strings.Contains(err.Error(), s.cfg.Runtime) {
		return nil
	}
	err = fmt.Errorf("%w: the Docker engine has no runtime %q (%v); register it in daemon.json (docs/security.md) or change `runtime`",
		boxapi.ErrRuntimeMissing, s.cfg.Runtime, err)
	if s.firstTime(&s.warnedRuntime, s.cfg.Runtime) {
		s.log.Error("the sandbox container cannot be made", zap.String("runtime", s.cfg.Runtime), zap.Error(err))
	}
	return err
}

// noteRuntime records the runtime the container runs under (name as its HostConfig
// says, "" the engine's default) and logs, once per runtime, what its configuration
// breaks.
func (s *lifecycle) noteRuntime(name string, info boxapi.EngineInfo) {
	r := factsOf(info, name)
	off := ""
	if s.cfg.KeepProcesses {
		off = noKeep(r, s.cli, info.Experimental)
	}
	s.sb.mu.Lock()
	s.runtime = r
	s.runtimeSeen = true
	s.sb.saves.keepOff = off
	s.sb.mu.Unlock()
	if off != "" && s.firstTime(&s.sb.saves.warnedKeep, off) {
		s.log.Warn("keep_processes is on, but this sandbox's stops end its processes", zap.String("reason", off))
	}
	if p := r.problem(); p != "" && s.firstTime(&s.warnedRuntimeConf, r.name+"\x00"+p) {
		s.log.Warn("the sandbox's container runtime is configured so that some features do not work", zap.String("runtime", r.name),
			zap.Strings("runtime_args", r.args), zap.String("problem", p))
	}
	want := s.cfg.Runtime
	if want == "" {
		want = info.DefaultRuntime
	}
	if want != "" && r.name != "" && want != r.name && s.firstTime(&s.warnedRuntimeChange, r.name+"\x00"+want) {
		s.log.Warn("the sandbox container runs under another runtime than configured; the configured one applies when the container is next made (the console's Recreate, or a restore)",
			zap.String("container_runtime", r.name), zap.String("configured_runtime", want))
	}
}

// runtimeNow is the runtime the container runs under as last seen, or, before the
// container was seen, the configured one.
func (s *lifecycle) runtimeNow() runtimeFacts {
	s.sb.mu.Lock()
	defer s.sb.mu.Unlock()
	if s.runtimeSeen {
		return s.runtime
	}
	return runtimeFacts{name: s.cfg.Runtime, gvisor: isGVisor(s.cfg.Runtime, "")}
}

// Runtime is the container runtime the sandbox runs under: the container's, once it
// was seen, else the configured one ("" the engine's default, not yet known).
func (s *Sandbox) Runtime() boxapi.Runtime {
	r := s.life.runtimeNow()
	keeps, _ := s.KeepsProcesses()
	return boxapi.Runtime{Name: r.name, GVisor: r.gvisor, Problem: r.problem(), KeepsProcesses: keeps}
}

// firstTime sets *last to key and reports whether it held another: what was logged
// last is not logged again.
func (s *lifecycle) firstTime(last *string, key string) bool {
	s.sb.mu.Lock()
	defer s.sb.mu.Unlock()
	if *last == key {
		return false
	}
	*last = key
	return true
}

// commitSeesWrites refuses a checkpoint of the container of info when its runtime
// keeps the container's writes where docker commit does not see them: it would save
// the image as it was, not the sandbox.
func (s *lifecycle) commitSeesWrites(ctx context.Context, info boxapi.Box) error {
	host, err := s.cli.EngineInfo(ctx)
	if err != nil {
		return fmt.Errorf("asking Docker for host information: %w", err)
	}
	r := factsOf(host, info.Spec.Runtime)
	if why := r.noCommit(); why != "" {
		return fmt.Errorf("%w: %s", boxapi.ErrCheckpointEmpty, why)
	}
	return nil
}
