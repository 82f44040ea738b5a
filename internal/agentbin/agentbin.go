// Package agentbin holds the sandbox agent (cmd/sandbox-agent) built for Linux on each
// architecture the plugin supports, so that Caddy can copy it into a container of any
// image. The binaries are static (CGO_ENABLED=0) and reproducible: `go generate
// ./internal/agentbin` rebuilds them from the agent's source, and TestBinariesMatchSource
// checks that the committed ones are what the source gives.
package agentbin

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
)

//go:embed manifest.json sandbox-agent-linux-*.gz
var files embed.FS

// manifest mirrors manifest.json, written by gen.
type manifest struct {
	Go     string            `json:"go"`
	SHA256 map[string]string `json:"sha256"`
	Size   map[string]int    `json:"size"`
}

var (
	manifestOnce sync.Once
	theManifest  manifest

	binsMu sync.Mutex
	bins   = map[string]*binary{}
)

// binary is one architecture's agent, decompressed at most once.
type binary struct {
	once sync.Once
	b    []byte
	sum  string
	err  error
}

func readManifest() manifest {
	manifestOnce.Do(func() {
		b, err := files.ReadFile("manifest.json")
		if err == nil {
			err = json.Unmarshal(b, &theManifest)
		}
		if err != nil {
			panic("agentbin: reading the embedded manifest.json: " + err.Error())
		}
	})
	return theManifest
}

// Arches lists the architectures with a binary, in Go's spelling, sorted.
func Arches() []string {
	m := readManifest()
	out := make([]string, 0, len(m.SHA256))
	for a := range m.SHA256 {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// Binary returns the agent for a Docker/Go architecture name ("amd64", "arm64"; also
// accept Docker's "x86_64"/"aarch64" spellings and "arm64/v8"), its sha256 in hex, and
// false when none is built for it. The bytes are shared: callers must not modify them.
func Binary(arch string) (bin []byte, sum string, ok bool) {
	a := normalize(arch)
	want, ok := readManifest().SHA256[a]
	if !ok {
		return nil, "", false
	}
	binsMu.Lock()
	e := bins[a]
	if e == nil {
		e = &binary{}
		bins[a] = e
	}
	binsMu.Unlock()
	e.once.Do(func() { e.b, e.sum, e.err = load(a, want) })
	if e.err != nil {
		// The embedded files are checked by the tests; this is a broken build.
		panic("agentbin: " + e.err.Error())
	}
	return e.b, e.sum, true
}

// normalize maps the spellings Docker and uname use to Go's GOARCH.
func normalize(arch string) string {
	a := strings.ToLower(strings.TrimSpace(arch))
	a = strings.TrimPrefix(a, "linux/")
	if a == "arm64/v8" || a == "aarch64/v8" {
		a = "arm64"
	}
	switch a {
	case "x86_64", "x86-64":
		return "amd64"
	case "aarch64":
		return "arm64"
	}
	return a
}

// load decompresses the agent for arch and checks it against the manifest.
func load(arch, want string) ([]byte, string, error) {
	name := "sandbox-agent-linux-" + arch + ".gz"
	gz, err := files.ReadFile(name)
	if err != nil {
		return nil, "", err
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", name, err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", name, err)
	}
	s := sha256.Sum256(b)
	sum := hex.EncodeToString(s[:])
	if sum != want {
		return nil, "", fmt.Errorf("%s: sha256 %s, manifest.json says %s; run go generate ./internal/agentbin", name, sum, want)
	}
	return b, sum, nil
}
