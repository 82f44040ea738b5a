package integration

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// pipWheel is the name of the one package the stand-in index serves.
const pipWheel = "hello_egress-1.0-py3-none-any.whl"

// newPipIndex is a stand-in for PyPI on loopback: a PEP 503 simple index with one
// small wheel. It records the paths it was asked for.
func newPipIndex(t *testing.T) (*httptest.Server, func() []string) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, body := range map[string]string{
		"hello_egress/__init__.py":            "GREETING = 'hello through the proxy'\n",
		"hello_egress-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: hello-egress\nVersion: 1.0\n",
		"hello_egress-1.0.dist-info/WHEEL":    "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
		"hello_egress-1.0.dist-info/RECORD":   "",
	} {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(body))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	wheel := buf.Bytes()
	sum := sha256.Sum256(wheel)
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		switch r.URL.Path {
		case "/simple/hello-egress/":
			fmt.Fprintf(w, "<!DOCTYPE html><html><body><a href=\"/files/%s#sha256=%x\">%s</a></body></html>\n", pipWheel, sum, pipWheel)
		case "/files/" + pipWheel:
			w.Write(wheel)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), paths...)
	}
}

// Through a real Caddy: `pip download` in the Debian image fetches a package from an
// allowed index through the egress proxy, and an index that is not allowed gets 403,
// which the tool result names. pip is the image's, or else Debian's pip wheel from this
// machine (/usr/share/python-wheels), run from the wheel.
func TestEgressPipDownload(t *testing.T) {
	hostWheels, _ := filepath.Glob("/usr/share/python-wheels/pip-*.whl")
	idx, paths := newPipIndex(t)
	pu, _ := url.Parse(idx.URL)
	port := pu.Port()
	s := testsite.Start(t, testsite.Options{Image: "code-sandbox-debian:latest", Directive: []string{fmt.Sprintf(`egress {
			allow pypi.test:%[1]s
			host pypi.test 127.0.0.1
			host other.test 127.0.0.1
		}`, port)}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := s.Client(ctx)
	// The proxy listens once the agent runs (and the container exists).
	testsite.Call(ctx, t, c, "execute", map[string]any{"command": `for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/3128) 2>/dev/null && break; sleep 0.1; done`})
	pip := "python3 -m pip"
	if out, _ := s.Exec("python3 -m pip --version"); !strings.HasPrefix(out, "pip ") {
		if len(hostWheels) == 0 {
			t.Skip("pip is neither in the image nor on this machine (/usr/share/python-wheels)")
		}
		data, err := os.ReadFile(hostWheels[len(hostWheels)-1])
		if err != nil {
			t.Fatal(err)
		}
		s.PutFile("/opt/pip.whl", data)
		pip = "python3 /opt/pip.whl/pip"
	}
	download := func(host string) (string, map[string]any) {
		t.Helper()
		res := testsite.Call(ctx, t, c, "execute", map[string]any{"command": pip + ` download --no-deps --no-cache-dir --disable-pip-version-check --retries 0 --timeout 10 --trusted-host ` + host + ` --index-url http://` + host + `:` + port + `/simple/ -d /sandbox/dl hello-egress && ls /sandbox/dl`})
		return testsite.ResultText(res), testsite.Structured(t, res)
	}
	text, out := download("pypi.test")
	if out["exit_code"] != 0.0 || !strings.Contains(out["stdout"].(string), pipWheel) {
		t.Fatalf("pip download from the allowed index: %s", text)
	}
	seen := paths()
	if len(seen) < 2 || seen[0] != "/simple/hello-egress/" {
		t.Fatalf("the index saw %v", seen)
	}
	text, out = download("other.test")
	if out["exit_code"] == 0.0 || !strings.Contains(out["note"].(string), "blocked: other.test (not allowed by the operator)") {
		t.Fatalf("pip download from an index that is not allowed: %s", text)
	}
	if got := paths(); len(got) != len(seen) {
		t.Fatalf("the index saw the refused requests: %v", got[len(seen):])
	}
}
