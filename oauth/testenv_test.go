package oauth

import (
	"bytes"
	"context"
	"encoding/json"
	"html"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
)

const testKey = "correct horse battery staple"

// testClock is a settable Options.Now.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newTestClock() *testClock { return &testClock{now: time.Now()} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// testEnv is a real HTTP server serving a Server plus a protected resource at /mcp, the
// way the host package wires them. The Server can be swapped to simulate a restart.
type testEnv struct {
	t       *testing.T
	ts      *httptest.Server
	storage *certmagic.FileStorage
	clock   *testClock
	opts    Options
	srv     atomic.Pointer[Server]
	origin  string
	client  *http.Client  // does not follow redirects
	sleeps  atomic.Int64  // delays requested after wrong keys, in milliseconds
	logs    *lockedBuffer // every log line, at debug level
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newTestEnv(t *testing.T, configure func(*Options)) *testEnv {
	t.Helper()
	e := &testEnv{t: t, storage: &certmagic.FileStorage{Path: t.TempDir()}, clock: newTestClock(), logs: &lockedBuffer{}}
	e.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		srv := e.srv.Load()
		if srv.Handles(r) {
			srv.ServeHTTP(w, r)
			return
		}
		if r.URL.Path != "/mcp" {
			http.NotFound(w, r)
			return
		}
		id, ok := srv.Authenticate(w, r)
		if !ok {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(id)
	}))
	t.Cleanup(e.ts.Close)
	e.origin = e.ts.URL
	e.opts = Options{
		APIKey:  testKey,
		Storage: e.storage,
		Now:     e.clock.Now,
		Logger: zap.New(zapcore.NewTee(
			zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Core(),
			zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewDevelopmentEncoderConfig()), zapcore.AddSync(e.logs), zap.DebugLevel),
		)),
	}
	if configure != nil {
		configure(&e.opts)
	}
	e.restart(e.opts)
	e.client = &http.Client{
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       30 * time.Second,
	}
	return e
}

// restart replaces the Server with a new one made from opts, on the same storage.
func (e *testEnv) restart(opts Options) *Server {
	e.t.Helper()
	srv, err := New(opts)
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	srv.sleep = func(_ *http.Request, d time.Duration) { e.sleeps.Add(d.Milliseconds()) }
	e.srv.Store(srv)
	return srv
}

func (e *testEnv) server() *Server { return e.srv.Load() }

// do sends a request and returns the status, headers and body.
func (e *testEnv) do(req *http.Request) (*http.Response, []byte) {
	e.t.Helper()
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("reading %s: %v", req.URL, err)
	}
	return resp, body
}

func (e *testEnv) get(path string) (*http.Response, []byte) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.url(path), nil)
	return e.do(req)
}

func (e *testEnv) postForm(path string, form url.Values) (*http.Response, []byte) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.url(path), strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return e.do(req)
}

func (e *testEnv) postJSON(path string, body []byte) (*http.Response, []byte) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.url(path), bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	return e.do(req)
}

func (e *testEnv) url(path string) string {
	if strings.HasPrefix(path, "http") {
		return path
	}
	return e.origin + path
}

// callMCP calls the protected resource with a bearer token and returns the status.
func (e *testEnv) callMCP(token string) int {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.url("/mcp"), strings.NewReader("{}"))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, _ := e.do(req)
	return resp.StatusCode
}

// register does dynamic client registration and returns the response.
func (e *testEnv) register(meta map[string]any) registrationResponse {
	e.t.Helper()
	body, _ := json.Marshal(meta)
	resp, out := e.postJSON("/register", body)
	if resp.StatusCode != http.StatusCreated {
		e.t.Fatalf("register: %d %s", resp.StatusCode, out)
	}
	var reg registrationResponse
	if err := json.Unmarshal(out, &reg); err != nil {
		e.t.Fatalf("register response: %v", err)
	}
	return reg
}

var hiddenInput = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)

// formFields returns the hidden fields of the sign-in page.
func formFields(t *testing.T, page []byte) url.Values {
	t.Helper()
	v := url.Values{}
	for _, m := range hiddenInput.FindAllSubmatch(page, -1) {
		v.Set(html.UnescapeString(string(m[1])), html.UnescapeString(string(m[2])))
	}
	if v.Get("csrf") == "" {
		t.Fatalf("no csrf field in the sign-in page:\n%s", page)
	}
	return v
}

// signIn opens the sign-in page at authURL, submits the key, and returns the redirect.
func (e *testEnv) signIn(authURL, key string) *url.URL {
	e.t.Helper()
	resp, page := e.get(authURL)
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("GET sign-in page: %d %s", resp.StatusCode, page)
	}
	form := formFields(e.t, page)
	form.Set("api_key", key)
	resp, body := e.postForm("/authorize", form)
	if resp.StatusCode != http.StatusSeeOther {
		e.t.Fatalf("POST sign-in: %d %s", resp.StatusCode, body)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		e.t.Fatalf("redirect: %v", err)
	}
	return loc
}

// keys lists every storage key under the OAuth prefix, sorted, locks excluded.
func (e *testEnv) keys() []string {
	e.t.Helper()
	var keys []string
	root := e.storage.Path
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "locks" {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		keys = append(keys, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		e.t.Fatalf("listing storage: %v", err)
	}
	sort.Strings(keys)
	return keys
}

func (e *testEnv) ctx() context.Context { return e.t.Context() }

// noSecretsLogged fails if any of the secrets appears in the logs.
func (e *testEnv) noSecretsLogged(secrets ...string) {
	e.t.Helper()
	logs := e.logs.String()
	if logs == "" {
		e.t.Fatal("nothing was logged")
	}
	for _, s := range append(secrets, testKey) {
		if s != "" && strings.Contains(logs, s) {
			e.t.Errorf("a secret was logged: %.8s...", s)
		}
	}
}
