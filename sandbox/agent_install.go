package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentbin"
)

// agentDir is where the agent's binary is copied in the container.
const agentDir = "/var/lib/mcp-sandbox/bin"

// containerArch is a container's image architecture, remembered by container ID: the
// image of a container never changes, and a new container has a new ID.
type containerArch struct{ id, arch string }

// installAgent puts the agent binary for the container's architecture where the
// container can run it, and returns its path there. When the container has its direct
// channel's directory (mounted read-only, agent_direct.go) and mounted is true, the
// binary goes there from this side: nothing in the container can replace it between
// now and its exec, as it could a copy in the container's own filesystem. Otherwise it
// is copied through the archive API into agentDir/sandbox-agent-<first 12 hex of its
// sha256> (mode 0755, directories created), afresh on every call (the caller calls it
// once per agent start, never per command). Errors say why (architecture without a
// binary, read-only filesystem, no space...).
func (s *agentLink) installAgent(ctx context.Context, mounted bool) (string, error) {
	arch, hasDir, err := s.imageArch(ctx)
	if err != nil {
		return "", fmt.Errorf("installing the sandbox agent: %w", err)
	}
	bin, sum, ok := agentbin.Binary(arch)
	if !ok {
		return "", fmt.Errorf("installing the sandbox agent: none is built for the image's architecture %q (only %s)",
			arch, strings.Join(agentbin.Arches(), ", "))
	}
	name := "sandbox-agent-" + sum[:12]
	if mounted && hasDir && s.readOnlyUsable(s.agentContainer()) {
		if err := s.placeAgent(name, bin); err == nil {
			return directMount + "/" + name, nil
		} else {
			s.log.Debug("the agent's binary cannot go into the container's read-only directory; it is copied in",
				zap.String("dir", s.directDir()), zap.Error(err))
		}
	}
	target := path.Join(agentDir, name)

	// Copied to "/" with entries for our own directories only: the extraction sets the
	// mode and owner of every directory it has an entry for, and /var and /var/lib are
	// the image's. Missing parents are created 0755.
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	rel := strings.TrimPrefix(agentDir, "/")
	for _, dir := range []string{path.Dir(rel), rel} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755, ModTime: now}); err != nil {
			return "", err
		}
	}
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(target, "/"), Mode: 0o755, Size: int64(len(bin)), ModTime: now}
	if err := tw.WriteHeader(hdr); err != nil {
		return "", err
	}
	if _, err := tw.Write(bin); err != nil {
		return "", err
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := s.cli.CopyIn(ctx, s.cfg.Container, "/", &buf); err != nil {
		return "", fmt.Errorf("installing the sandbox agent: copying it to %s%s: %w", target, copyFailure(err), err)
	}
	return target, nil
}

// copyFailure names the usual reasons an archive copy fails, for the log reader.
func copyFailure(err error) string {
	msg := strings.ToLower(err.Error())
	switch {
	case strings.Contains(msg, "read-only"):
		return " (the container's root filesystem is read-only)"
	case strings.Contains(msg, "no space left"), strings.Contains(msg, "quota"):
		return " (no space left on the container's filesystem)"
	case strings.Contains(msg, "not running"), strings.Contains(msg, "no such container"):
		return " (the container is not running)"
	}
	return ""
}

// imageArch returns the architecture of the container's image ("amd64", "arm64"...),
// and whether the container has its direct channel's directory, read-only.
func (s *agentLink) imageArch(ctx context.Context) (arch string, hasDir bool, err error) {
	c, err := s.cli.InspectBox(ctx, s.cfg.Container)
	if err != nil {
		return "", false, fmt.Errorf("inspecting container %s: %w", s.cfg.Container, err)
	}
	life := containerLife{id: c.ID, startedAt: c.State.StartedAt}
	s.agentMu.Lock()
	s.agent.life = life
	s.agentMu.Unlock()
	if dir := s.directDir(); dir != "" && !s.noBind.Load() {
		for _, m := range c.Spec.Mounts {
			if m.Destination == directMount && m.ReadOnly && sameDir(m.Source, dir) {
				hasDir = true
			}
		}
	}
	s.sb.mu.Lock()
	known := s.agentArch
	s.sb.mu.Unlock()
	if known.id == c.ID {
		return known.arch, hasDir, nil
	}
	img, err := s.cli.InspectImage(ctx, c.ImageID)
	switch {
	case cerrdefs.IsNotImplemented(err):
		// An engine without images (Kubernetes): the machine the pod runs on says.
		if arch, err = s.machineArch(ctx); err != nil {
			return "", false, fmt.Errorf("asking container %s its architecture (uname -m): %w", s.cfg.Container, err)
		}
	case err != nil:
		return "", false, fmt.Errorf("inspecting the image of container %s: %w", s.cfg.Container, err)
	default:
		arch = img.Architecture
	}
	s.sb.mu.Lock()
	s.agentArch = containerArch{c.ID, arch}
	s.sb.mu.Unlock()
	return arch, hasDir, nil
}

// machineArch runs uname -m in the container through an engine exec (never the agent,
// which is being installed) and names the result as images do (amd64, arm64...).
func (s *agentLink) machineArch(ctx context.Context) (string, error) {
	p, err := s.sb.runner.startEngineProc(ctx, container.ExecOptions{
		User: "root", AttachStdout: true, AttachStderr: true, Cmd: []string{"uname", "-m"},
	})
	if err != nil {
		return "", err
	}
	defer p.Close()
	stop := context.AfterFunc(ctx, func() { _ = p.Close() })
	defer stop()
	var out []byte
	err = drain(p, func(b []byte) { out = append(out, b[:min(len(b), 64-len(out))]...) }, func([]byte) {})
	if err != nil {
		return "", err
	}
	if code, ok := p.exitCode(ctx, false); !ok || code != 0 {
		return "", fmt.Errorf("uname -m did not succeed (exit code %d)", code)
	}
	return unameArch(strings.TrimSpace(string(out)))
}

// unameArch is the image architecture of a machine name uname -m prints.
func unameArch(m string) (string, error) {
	switch m {
	case "x86_64", "amd64":
		return "amd64", nil
	case "aarch64", "arm64", "armv8l":
		return "arm64", nil
	case "riscv64":
		return "riscv64", nil
	case "ppc64le":
		return "ppc64le", nil
	case "s390x":
		return "s390x", nil
	}
	return "", fmt.Errorf("unknown machine %q", m)
}

// placeAgent puts bin, named name, into the container's directory on this machine: a
// hard link to one copy kept beside the containers' directories (one copy for all of
// them), or a copy of its own where a link cannot be made. A file already there with
// the right bytes stays.
func (s *agentLink) placeAgent(name string, bin []byte) error {
	dir := s.directDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	target := filepath.Join(dir, name)
	if sameFile(target, bin) {
		return nil
	}
	shared := filepath.Join(s.cfg.AgentSocketDir, name)
	if !sameFile(shared, bin) {
		if err := writeExecutable(shared, bin); err != nil {
			return err
		}
	}
	os.Remove(target)
	if err := os.Link(shared, target); err == nil {
		return nil
	}
	return writeExecutable(target, bin)
}

// sameFile reports whether the file at p holds exactly b.
func sameFile(p string, b []byte) bool {
	got, err := os.ReadFile(p)
	return err == nil && bytes.Equal(got, b)
}

// writeExecutable writes b to p (mode 0755) through a temporary file renamed into
// place, so no half-written binary is ever run.
func writeExecutable(p string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(p), ".agent-")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o755)
	}
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
