package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentbin"
)

// agentDir is where the agent's binary is copied in the container.
const agentDir = "/var/lib/mcp-sandbox/bin"

// containerArch is a container's image architecture, remembered by container ID: the
// image of a container never changes, and a new container has a new ID.
type containerArch struct{ id, arch string }

// installAgent copies the agent binary for the container's architecture into
// agentDir/sandbox-agent-<first 12 hex of its sha256> (mode 0755, directories created)
// through the archive API and returns its path. It copies afresh on every call (the
// caller calls it once per agent start, never per command). Errors say why
// (architecture without a binary, read-only filesystem, no space...).
func (s *Sandbox) installAgent(ctx context.Context) (string, error) {
	arch, err := s.imageArch(ctx)
	if err != nil {
		return "", fmt.Errorf("installing the sandbox agent: %w", err)
	}
	bin, sum, ok := agentbin.Binary(arch)
	if !ok {
		return "", fmt.Errorf("installing the sandbox agent: none is built for the image's architecture %q (only %s)",
			arch, strings.Join(agentbin.Arches(), ", "))
	}
	target := path.Join(agentDir, "sandbox-agent-"+sum[:12])

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
	if err := s.cli.CopyToContainer(ctx, s.cfg.Container, "/", &buf, container.CopyToContainerOptions{}); err != nil {
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

// imageArch returns the architecture of the container's image ("amd64", "arm64"...).
func (s *Sandbox) imageArch(ctx context.Context) (string, error) {
	c, err := s.cli.ContainerInspect(ctx, s.cfg.Container)
	if err != nil {
		return "", fmt.Errorf("inspecting container %s: %w", s.cfg.Container, err)
	}
	s.mu.Lock()
	known := s.agentArch
	s.mu.Unlock()
	if known.id == c.ID {
		return known.arch, nil
	}
	img, err := s.cli.ImageInspect(ctx, c.Image)
	if err != nil {
		return "", fmt.Errorf("inspecting the image of container %s: %w", s.cfg.Container, err)
	}
	s.mu.Lock()
	s.agentArch = containerArch{c.ID, img.Architecture}
	s.mu.Unlock()
	return img.Architecture, nil
}
