package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/chromedp/chromedp"
	"golang.org/x/oauth2"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/browsertest"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// consoleUser is a browser-like HTTP client signed in to the console.
type consoleUser struct {
	t    *testing.T
	base string
	hc   *http.Client
}

func newConsoleUser(t *testing.T, base string) *consoleUser {
	jar, _ := cookiejar.New(nil)
	return &consoleUser{t: t, base: base, hc: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (u *consoleUser) do(method, path string, form url.Values, hdr map[string]string) (*http.Response, string) {
	u.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, u.base+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := u.hc.Do(req)
	if err != nil {
		u.t.Fatalf("%s %s: %v", method, path, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf reads the session's CSRF token off a page.
func (u *consoleUser) csrf() string {
	u.t.Helper()
	_, page := u.do("GET", "/console/links", nil, nil)
	m := csrfInput.FindStringSubmatch(page)
	if m == nil {
		u.t.Fatalf("no CSRF token on the links page: %.300s", page)
	}
	return m[1]
}

// api calls the console API with the API key as bearer and decodes the JSON answer.
func apiCall(t *testing.T, s *testsite.Site, method, path string, out any) int {
	t.Helper()
	req, _ := http.NewRequest(method, s.URL+"/console/api"+path, nil)
	req.Header.Set("Authorization", "Bearer "+s.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		b, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
	}
	return resp.StatusCode
}

type apiEntry struct {
	Client   string `json:"client"`
	Tool     string `json:"tool"`
	Args     string `json:"args"`
	Outcome  string `json:"outcome"`
	ExitCode *int   `json:"exit_code"`
	Bytes    int64  `json:"bytes"`
	Subject  string `json:"subject"`
}

func activity(t *testing.T, s *testsite.Site, query string) []apiEntry {
	t.Helper()
	var out struct {
		Entries []apiEntry `json:"entries"`
	}
	if code := apiCall(t, s, "GET", "/activity?"+query, &out); code != 200 {
		t.Fatalf("activity: %d", code)
	}
	return out.Entries
}

func httpStatus(t *testing.T, u string) int {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// xssCommand carries markup, both quote kinds and control characters; the console must
// show it as inert text.
const xssCommand = `echo "<script>window.__xss=1</script><img src=x onerror=window.__xss=2>" 'it'"'"'s "quoted"' '` + "\x1b[31mred\x07\r" + `'`

// TestConsole drives the operator's console against a real Caddy and a real container:
// sign-in and its cookie, headers that forbid framing, CSRF refusals, the audit log
// (inert markup, filters, export, survival across a Caddy restart), revoking a link
// and an OAuth sign-in, restart and recreate keeping /sandbox, the jobs API, every
// page in headless Chromium, and the wrong-key throttle shared with the OAuth page.
func TestConsole(t *testing.T) {
	s := testsite.Start(t, testsite.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := s.Client(ctx)
	testsite.Call(ctx, t, c, "execute", map[string]any{"command": "mkdir -p /sandbox/docs && echo kept > /sandbox/docs/keep.txt && echo one > /sandbox/one.txt && echo two > /sandbox/two.txt"})
	res := testsite.Call(ctx, t, c, "execute", map[string]any{"command": xssCommand})
	if testsite.Structured(t, res)["exit_code"].(float64) != 0 {
		t.Fatalf("xss command: %s", testsite.ResultText(res))
	}
	testsite.Call(ctx, t, c, "execute", map[string]any{"command": "exit 3"})

	u := newConsoleUser(t, s.URL)
	t.Run("sign-in", func(t *testing.T) {
		resp, _ := u.do("GET", "/console", nil, nil)
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/signin" {
			t.Fatalf("unsigned /console: %d %s", resp.StatusCode, resp.Header.Get("Location"))
		}
		resp, page := u.do("GET", "/console/signin", nil, nil)
		h := resp.Header
		if resp.StatusCode != 200 || h.Get("X-Frame-Options") != "DENY" || !strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") ||
			!strings.Contains(h.Get("Content-Security-Policy"), "default-src 'none'") || strings.Contains(page, "<script") {
			t.Fatalf("sign-in page: %d %v", resp.StatusCode, h)
		}
		resp, page = u.do("POST", "/console/signin", url.Values{"api_key": {"wrong-" + s.Key}}, nil)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(page, "not correct") || len(resp.Cookies()) != 0 {
			t.Fatalf("wrong key: %d %v", resp.StatusCode, resp.Cookies())
		}
		resp, page = u.do("POST", "/console/signin", url.Values{"api_key": {s.Key}}, map[string]string{"Origin": "http://evil.example"})
		if resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
			t.Fatalf("cross-site sign-in: %d %s", resp.StatusCode, page)
		}
		resp, _ = u.do("POST", "/console/signin", url.Values{"api_key": {s.Key}}, map[string]string{"Origin": s.URL})
		var ck *http.Cookie
		for _, k := range resp.Cookies() {
			if k.Name == "mcp-console" {
				ck = k
			}
		}
		if resp.StatusCode != http.StatusSeeOther || ck == nil || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Secure || ck.Path != "/" {
			t.Fatalf("sign-in: %d cookie %+v", resp.StatusCode, ck)
		}
		resp, page = u.do("GET", "/console", nil, nil)
		if resp.StatusCode != 200 || !strings.Contains(page, s.Container) || !strings.Contains(page, "running") || resp.Header.Get("X-Frame-Options") != "DENY" {
			t.Fatalf("overview: %d %.500s", resp.StatusCode, page)
		}
	})

	t.Run("activity is inert", func(t *testing.T) {
		_, page := u.do("GET", "/console/activity", nil, nil)
		if strings.Contains(page, "<script>window") || strings.Contains(page, "<img src=x") {
			t.Fatalf("the command reached the page as markup")
		}
		for _, want := range []string{"&lt;script&gt;window.__xss=1&lt;/script&gt;", `\u001b[31mred\u0007`, "&#39;it&#39;", "exit 3"} {
			if !strings.Contains(page, want) {
				t.Errorf("activity page lacks %q", want)
			}
		}
		es := activity(t, s, "tool=execute&outcome=nonzero")
		if len(es) != 1 || es[0].ExitCode == nil || *es[0].ExitCode != 3 || es[0].Client != "API key" {
			t.Fatalf("filtered activity: %+v", es)
		}
		resp, body := u.do("GET", "/console/activity.jsonl?tool=execute", nil, nil)
		lines := strings.Split(strings.TrimSpace(body), "\n")
		var first apiEntry
		if resp.StatusCode != 200 || len(lines) != 3 || json.Unmarshal([]byte(lines[0]), &first) != nil || !strings.Contains(first.Args, "keep.txt") {
			t.Fatalf("export: %d %q", resp.StatusCode, body)
		}
	})

	t.Run("csrf", func(t *testing.T) {
		before := len(activity(t, s, "outcome=denied&limit=0"))
		resp, _ := u.do("POST", "/console/action", url.Values{"action": {"restart"}}, nil)
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("action without CSRF token: %d", resp.StatusCode)
		}
		resp, _ = u.do("POST", "/console/action", url.Values{"action": {"restart"}, "csrf": {u.csrf()}}, map[string]string{"Origin": "http://evil.example"})
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("cross-site action: %d", resp.StatusCode)
		}
		resp, _ = u.do("POST", "/console/api/sandbox/restart", nil, nil)
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("API call with the cookie and no CSRF header: %d", resp.StatusCode)
		}
		resp, _ = u.do("POST", "/console/signout", nil, nil)
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("sign-out without CSRF token: %d", resp.StatusCode)
		}
		if after := len(activity(t, s, "outcome=denied&limit=0")); after != before+4 {
			t.Fatalf("refusals in the audit log: %d, want %d", after, before+4)
		}
		var st struct{ State string }
		if code := apiCall(t, s, "GET", "/sandbox", &st); code != 200 || st.State != "running" {
			t.Fatalf("sandbox API: %d %+v", code, st)
		}
		req, _ := http.NewRequest("GET", s.URL+"/console/api/sandbox", nil)
		req.Header.Set("Authorization", "Bearer not-the-key-at-all")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Fatalf("API with a wrong bearer: %d", resp.StatusCode)
		}
	})

	t.Run("links", func(t *testing.T) {
		one := testsite.Structured(t, testsite.Call(ctx, t, c, "share_file", map[string]any{"path": "/sandbox/one.txt"}))["url"].(string)
		two := testsite.Structured(t, testsite.Call(ctx, t, c, "share_file", map[string]any{"path": "/sandbox/two.txt"}))["url"].(string)
		if httpStatus(t, one) != 200 || httpStatus(t, two) != 200 {
			t.Fatal("fresh links do not work")
		}
		var out struct {
			Links []struct {
				ID, Kind, Target, Creator string
				Revoked                   bool
			} `json:"links"`
		}
		if code := apiCall(t, s, "GET", "/links", &out); code != 200 || len(out.Links) != 2 {
			t.Fatalf("links API: %d %+v", code, out)
		}
		var id string
		for _, l := range out.Links {
			if l.Target == "/sandbox/one.txt" && l.Kind == "download" && l.Creator == "API key" {
				id = l.ID
			}
		}
		if id == "" {
			t.Fatalf("link one not listed: %+v", out.Links)
		}
		if code := apiCall(t, s, "DELETE", "/links/"+id, nil); code != 200 {
			t.Fatalf("revoking: %d", code)
		}
		if got := httpStatus(t, one); got != http.StatusGone {
			t.Fatalf("revoked link: %d, want 410", got)
		}
		if got := httpStatus(t, two); got != 200 {
			t.Fatalf("other link after revoking one: %d", got)
		}
		if code := apiCall(t, s, "DELETE", "/links/nosuchlink0000", nil); code != 404 {
			t.Fatalf("revoking an unknown link: %d", code)
		}
		dl := activity(t, s, "tool=download")
		if len(dl) != 4 || dl[0].Outcome != "ok" || dl[1].Outcome != "denied" || dl[0].Bytes != 4 {
			t.Fatalf("downloads in the audit log: %+v", dl)
		}
	})

	t.Run("revoke sign-in", func(t *testing.T) {
		tok := s.OAuthToken(ctx, t, "Revocable client")
		oc, err := mcpWithToken(ctx, t, s.URL, tok)
		if err != nil {
			t.Fatal(err)
		}
		testsite.Call(ctx, t, oc, "execute", map[string]any{"command": "echo via-oauth"})
		var out struct {
			Grants []struct {
				ID, ClientName string
				LastUsedAt     time.Time `json:"last_used_at"`
			} `json:"grants"`
			Clients []struct {
				Name string `json:"client_name"`
			} `json:"clients"`
		}
		if code := apiCall(t, s, "GET", "/grants", &out); code != 200 || len(out.Grants) != 1 || len(out.Clients) != 1 || out.Clients[0].Name != "Revocable client" {
			t.Fatalf("grants API: %d %+v", code, out)
		}
		if out.Grants[0].LastUsedAt.IsZero() {
			t.Errorf("last use of the sign-in not shown: %+v", out.Grants[0])
		}
		// Revoke through the page's form, as a person would.
		resp, _ := u.do("POST", "/console/action", url.Values{"action": {"revoke_grant"}, "id": {out.Grants[0].ID}, "back": {"access"}, "csrf": {u.csrf()}}, nil)
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/access?done=revoke_grant" {
			t.Fatalf("revoke form: %d %s", resp.StatusCode, resp.Header.Get("Location"))
		}
		if code := statusWithToken(t, s.URL, tok); code != 401 {
			t.Fatalf("the revoked client's next call: %d, want 401", code)
		}
		if es := activity(t, s, "tool=console.revoke_grant"); len(es) != 1 || es[0].Outcome != "ok" || es[0].Client != "console" {
			t.Fatalf("revocation in the audit log: %+v", es)
		}
	})

	t.Run("restart and recreate keep /sandbox", func(t *testing.T) {
		id := s.ContainerID()
		if code := apiCall(t, s, "POST", "/sandbox/restart", nil); code != 200 {
			t.Fatalf("restart: %d", code)
		}
		if got := s.ContainerExec("cat /sandbox/docs/keep.txt"); got != "kept\n" || s.ContainerID() != id {
			t.Fatalf("after restart: %q", got)
		}
		resp, page := u.do("GET", "/console/confirm?action=recreate", nil, nil)
		if resp.StatusCode != 200 || !strings.Contains(page, "What survives") || !strings.Contains(page, "everything under /sandbox") {
			t.Fatalf("confirmation: %d", resp.StatusCode)
		}
		csrf := csrfInput.FindStringSubmatch(page)[1]
		resp, _ = u.do("POST", "/console/action", url.Values{"action": {"recreate"}, "back": {"overview"}, "csrf": {csrf}}, map[string]string{"Origin": s.URL})
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("recreate: %d", resp.StatusCode)
		}
		if got := s.ContainerExec("cat /sandbox/docs/keep.txt"); got != "kept\n" || s.ContainerID() == id {
			t.Fatalf("after recreate: %q (same container: %v)", got, s.ContainerID() == id)
		}
		if es := activity(t, s, "client=API+key&tool=console.restart"); len(es) != 1 {
			t.Fatalf("restart in the audit log: %+v", es)
		}
	})

	t.Run("jobs API", func(t *testing.T) {
		var out struct {
			Jobs []any `json:"jobs"`
		}
		if code := apiCall(t, s, "GET", "/jobs", &out); code != 200 || out.Jobs == nil {
			t.Fatalf("jobs: %d %+v", code, out)
		}
		if code := apiCall(t, s, "DELETE", "/jobs/nosuchjob", nil); code != 404 {
			t.Fatalf("killing an unknown job: %d", code)
		}
	})

	t.Run("browser", func(t *testing.T) {
		// A live sign-in, used once, for the Access page.
		oc, err := mcpWithToken(ctx, t, s.URL, s.OAuthToken(ctx, t, "Claude"))
		if err != nil {
			t.Fatal(err)
		}
		testsite.Call(ctx, t, oc, "execute", map[string]any{"command": "python3 --version || echo no python here"})
		consoleInBrowser(t, s)
	})

	t.Run("audit log survives a Caddy restart", func(t *testing.T) {
		before := activity(t, s, "limit=0")
		// An entry recorded just before the stop, too recent for the background flush.
		testsite.Call(ctx, t, c, "execute", map[string]any{"command": "echo last-before-stop"})
		if err := caddy.Stop(); err != nil {
			t.Fatal(err)
		}
		// Stopping flushed everything to Caddy's storage, where the next start reads it.
		files, _ := filepath.Glob(filepath.Join(s.Storage, "mcp_sandbox", "console", "audit", "*"))
		lines, disk := 0, ""
		for _, f := range files {
			b, _ := os.ReadFile(f)
			lines += strings.Count(string(b), "\n")
			disk += string(b)
		}
		if lines <= len(before) || !strings.Contains(disk, "last-before-stop") {
			t.Fatalf("%d entries on disk after stopping, %d before (the last one written: %v)", lines, len(before), strings.Contains(disk, "last-before-stop"))
		}
		s.Load(testsite.Options{})
		after := activity(t, s, "limit=0")
		// The listing itself adds nothing; the restart must lose nothing.
		if len(after) < len(before) || len(before) < 20 {
			t.Fatalf("entries before %d, after %d", len(before), len(after))
		}
		found := false
		for _, e := range after {
			if strings.Contains(e.Args, "window.__xss") {
				found = true
			}
		}
		if !found {
			t.Fatal("the XSS command's entry is gone after the restart")
		}
	})

	t.Run("wrong keys are throttled with the OAuth page", func(t *testing.T) {
		w := newConsoleUser(t, s.URL)
		var last *http.Response
		start := time.Now()
		for i := 0; i < 11; i++ {
			last, _ = w.do("POST", "/console/signin", url.Values{"api_key": {fmt.Sprintf("guess-%d", i)}}, nil)
			if last.StatusCode == http.StatusTooManyRequests {
				break
			}
		}
		if last.StatusCode != http.StatusTooManyRequests || last.Header.Get("Retry-After") == "" {
			t.Fatalf("after 11 wrong keys: %d", last.StatusCode)
		}
		if time.Since(start) < 10*time.Second {
			t.Errorf("wrong keys were answered without the growing delay (%v)", time.Since(start))
		}
		// The OAuth page counts the same failures, and the right key is refused too.
		resp, _ := w.do("POST", "/console/signin", url.Values{"api_key": {s.Key}}, nil)
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("right key while throttled: %d", resp.StatusCode)
		}
		q := oauthAuthorizeStatus(t, s)
		if q != http.StatusTooManyRequests {
			t.Fatalf("OAuth sign-in after console failures: %d, want 429", q)
		}
	})
}

// oauthAuthorizeStatus submits the right key on the OAuth sign-in page and returns the
// status it answers.
func oauthAuthorizeStatus(t *testing.T, s *testsite.Site) int {
	t.Helper()
	conf, verifier := s.OAuthConfig(t, "Throttled client")
	authURL := conf.AuthCodeURL("st", oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("resource", s.URL+"/mcp"))
	form, _ := testsite.SignInForm(t, authURL, s.Key)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.PostForm(s.URL+"/authorize", form)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// consoleInBrowser signs in with headless Chromium, visits every page, checks that the
// XSS command stayed text, and saves screenshots under testdata/artifacts/.
func consoleInBrowser(t *testing.T, s *testsite.Site) {
	ctx := browsertest.New(t, 1280, 900, 2*time.Minute)
	shot := func(name string) {
		t.Helper()
		browsertest.Screenshot(t, ctx, name)
	}

	if err := chromedp.Do(ctx, chromedp.Navigate(s.URL+"/console")); err != nil {
		t.Fatal(err)
	}
	if loc, _ := chromedp.Run(ctx, chromedp.Location()); !strings.HasSuffix(loc, "/console/signin") {
		t.Fatalf("unsigned browser is at %s", loc)
	}
	shot("console-signin.png")
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("api_key"), s.Key)); err != nil {
		t.Fatal(err)
	}
	resp, err := chromedp.RunResponse(ctx, chromedp.Submit(chromedp.ID("api_key")))
	if err != nil || resp.Status != 200 {
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string]("document.body.innerText"))
		t.Fatalf("signing in: %v %v: %s", resp.Status, err, text)
	}
	for _, p := range []struct{ path, want, file string }{
		{"/console", s.Container, "console-overview.png"},
		{"/console/activity", "window.__xss", "console-activity.png"},
		{"/console/access", "Claude", "console-access.png"},
		{"/console/links", "/sandbox/two.txt", "console-links.png"},
		{"/console/confirm?action=recreate", "What survives", "console-confirm-recreate.png"},
	} {
		resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(s.URL+p.path))
		if err != nil || resp.Status != 200 {
			t.Fatalf("%s: %v %v", p.path, resp, err)
		}
		text, err := chromedp.Run(ctx, chromedp.Evaluate[string]("document.body.innerText"))
		if err != nil || !strings.Contains(text, p.want) {
			t.Fatalf("%s does not show %q: %v %.400s", p.path, p.want, err, text)
		}
		shot(p.file)
	}
	// On the Activity page the command is text: no script ran, no element was made.
	if err := chromedp.Do(ctx, chromedp.Navigate(s.URL+"/console/activity")); err != nil {
		t.Fatal(err)
	}
	xss, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("window.__xss !== undefined || document.querySelectorAll('main script, main img').length > 0"))
	if err != nil || xss {
		t.Fatalf("the logged command became markup (%v)", err)
	}
	text, _ := chromedp.Run(ctx, chromedp.Evaluate[string]("document.body.innerText"))
	if !strings.Contains(text, `<script>window.__xss=1</script>`) || !strings.Contains(text, `\u001b[31mred\u0007`) {
		t.Fatalf("the command is not shown as text: %.600s", text)
	}
	// Signing out ends the session.
	if _, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(".signout button"))); err != nil {
		t.Fatal(err)
	}
	if loc, _ := chromedp.Run(ctx, chromedp.Location()); !strings.HasSuffix(loc, "/console/signin") {
		t.Fatalf("after signing out the browser is at %s", loc)
	}
}
