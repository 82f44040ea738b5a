// Command gen builds the sandbox agent for every architecture the plugin ships it for
// and writes the gzipped binaries and their manifest into a directory (the agentbin
// package's, when run by go generate). Its output depends only on the agent's source and
// the Go version, so a test can rebuild it and compare.
package main

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// agentPkg is the package built; named by import path so gen runs from any directory
// of the module.
const agentPkg = "github.com/mcp-sandbox/caddy-mcp-sandbox/cmd/sandbox-agent"

// arches are the GOARCH values built, with the baseline of each so that GOAMD64 or
// GOARM64 in the caller's environment cannot change the output.
var arches = []struct{ goarch, level string }{
	{"amd64", "GOAMD64=v1"},
	{"arm64", "GOARM64=v8.0"},
}

// manifest is manifest.json: what built the binaries and the SHA-256 of each
// (uncompressed), by GOARCH.
type manifest struct {
	Go     string            `json:"go"`
	SHA256 map[string]string `json:"sha256"`
	Size   map[string]int    `json:"size"`
}

func main() {
	out := flag.String("o", ".", "directory to write the binaries and manifest.json into")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "agentbin/gen:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	goVersion, err := goOutput(nil, "env", "GOVERSION")
	if err != nil {
		return err
	}
	m := manifest{Go: goVersion, SHA256: map[string]string{}, Size: map[string]int{}}
	tmp, err := os.MkdirTemp("", "agentbin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for _, a := range arches {
		bin := filepath.Join(tmp, "sandbox-agent-"+a.goarch)
		env := []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + a.goarch, a.level, "GOFLAGS=", "GOEXPERIMENT="}
		if _, err := goOutput(env, "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid=", "-o", bin, agentPkg); err != nil {
			return err
		}
		raw, err := os.ReadFile(bin)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(raw)
		m.SHA256[a.goarch] = hex.EncodeToString(sum[:])
		m.Size[a.goarch] = len(raw)
		gz, err := compress(raw)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, "sandbox-agent-linux-"+a.goarch+".gz"), gz, 0o644); err != nil {
			return err
		}
	}
	j, err := json.MarshalIndent(m, "", "\t")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "manifest.json"), append(j, '\n'), 0o644)
}

// compress gzips b at level 9 with an empty header (no name, no time), so equal input
// gives equal bytes.
func compress(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// goOutput runs the go command (the one on PATH: go generate and go test put the
// toolchain running them first) with env added to the environment.
func goOutput(env []string, args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return strings.TrimSpace(string(b)), nil
}
