package preview

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/expiry"
)

// With preview_auth on, a person signs in once per browser and preview host with the
// API key; a cookie scoped to that host (no Domain attribute, so no other preview and
// not the site sees it) carries an HMAC of the label and an expiry. The cookie is
// removed from requests before they reach the app.
const (
	signinPath   = "/.mcp-sandbox/preview-signin"
	cookieName   = "mcp_sandbox_preview"
	cookieLife   = 30 * 24 * time.Hour
	maxFormBytes = 8 << 10

	// Wrong keys per client address, counted in Options.Guesses (which refuses an
	// address after too many): after signinSlowAfter attempts each wrong key is
	// answered after a growing delay.
	signinSlowAfter = 5
	signinMaxDelay  = 5 * time.Second
)

// Guesses counts attempts at the API key per client address. The host passes the same
// value that counts wrong keys and bearer tokens on its other sign-in pages, so a guess
// at the key counts once, wherever it is made, and survives a config reload.
type Guesses interface {
	// Guess counts one attempt from addr and returns the attempts in the window, this
	// one included; when addr is refused it counts nothing and returns how long until
	// addr may try again.
	Guess(addr string) (n int, retryAfter time.Duration)
	// Forget clears addr once it proved it knows the key.
	Forget(addr string)
}

// cookieNameFor uses the __Host- prefix on HTTPS, so the cookie is bound to this exact
// host and path / and can never be set by a sibling subdomain.
func cookieNameFor(r *http.Request) string {
	if r.TLS != nil {
		return "__Host-" + cookieName
	}
	return cookieName
}

// cookieMAC is keyed with the key of the preview's owner, so a cookie made for one
// owner's preview never opens another's.
func (s *Server) cookieMAC(key, label string, exp int64) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte("mcp-sandbox preview\x00" + label + "\x00" + strconv.FormatInt(exp, 10)))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// authorized serves the sign-in page and its form post, and reports whether the
// request carries a valid cookie and may go on to the app.
func (s *Server) authorized(w http.ResponseWriter, r *http.Request, p Preview) bool {
	if r.URL.Path == signinPath {
		s.signin(w, r, p)
		return false
	}
	key, _ := s.opts.Owners(p.Owner)
	for _, c := range r.Cookies() {
		if c.Name != cookieNameFor(r) {
			continue
		}
		expStr, mac, ok := strings.Cut(c.Value, ".")
		exp, good := expiry.Parse(expStr)
		if ok && good && time.Now().Unix() < exp &&
			hmac.Equal([]byte(mac), []byte(s.cookieMAC(key, p.Label, exp))) {
			return true
		}
	}
	showSignin(w, r, r.URL.RequestURI(), "", http.StatusUnauthorized)
	return false
}

func (s *Server) signin(w http.ResponseWriter, r *http.Request, p Preview) {
	if r.Method != http.MethodPost {
		showSignin(w, r, "/", "", http.StatusOK)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		showSignin(w, r, "/", "The form could not be read.", http.StatusBadRequest)
		return
	}
	next := r.PostForm.Get("next")
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") {
		next = "/"
	}
	ip := s.opts.ClientIP(r)
	failures, retry := s.opts.Guesses.Guess(ip)
	if retry > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(retry.Seconds())+1))
		showSignin(w, r, next, "Too many wrong keys from your address; try again later.", http.StatusTooManyRequests)
		return
	}
	// Only the key of the preview's owner opens it: another person's key is a wrong key.
	key, _ := s.opts.Owners(p.Owner)
	a, b := sha256.Sum256([]byte(r.PostForm.Get("key"))), sha256.Sum256([]byte(key))
	if key == "" || subtle.ConstantTimeCompare(a[:], b[:]) != 1 {
		if failures > signinSlowAfter {
			delay := min(time.Duration(failures-signinSlowAfter)*500*time.Millisecond, signinMaxDelay)
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
				return
			}
		}
		s.log.Warn("wrong key on preview sign-in", zap.String("client_ip", ip), zap.String("host", p.Host()))
		showSignin(w, r, next, "That is not the key.", http.StatusUnauthorized)
		return
	}
	s.opts.Guesses.Forget(ip)
	exp := time.Now().Add(cookieLife).Unix()
	http.SetCookie(w, &http.Cookie{
		Name:     cookieNameFor(r),
		Value:    strconv.FormatInt(exp, 10) + "." + s.cookieMAC(key, p.Label, exp),
		Path:     "/",
		Expires:  time.Unix(exp, 0),
		HttpOnly: true,
		Secure:   r.TLS != nil,
		SameSite: http.SameSiteLaxMode,
	})
	noStore(w)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// stripAuthCookie removes our cookie, so the app never sees it.
func stripAuthCookie(r *http.Request) {
	cookies := r.Cookies()
	if len(cookies) == 0 {
		return
	}
	name := cookieNameFor(r)
	kept := make([]string, 0, len(cookies))
	dropped := false
	for _, c := range cookies {
		if c.Name == name {
			dropped = true
			continue
		}
		kept = append(kept, c.Name+"="+c.Value)
	}
	if !dropped {
		return
	}
	r.Header.Del("Cookie")
	if len(kept) > 0 {
		r.Header.Set("Cookie", strings.Join(kept, "; "))
	}
}

var signinPage = template.Must(template.New("signin").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sign in to see this preview</title>
<style>
body{font-family:system-ui,sans-serif;max-width:30rem;margin:4rem auto;padding:0 1rem;color:#222;line-height:1.5}
input[type=password]{width:100%;padding:.5em;font-size:1em;box-sizing:border-box}
button{margin-top:1em;padding:.5em 1.2em;font-size:1em}
.error{color:#b00020}
</style></head>
<body>
<h1>Sign in to see this preview</h1>
<p>This preview shows an app running in your sandbox. Enter your key once (the API key, or your own key if you have one); this browser then stays signed in for this preview.</p>
{{if .Error}}<p class="error" id="error">{{.Error}}</p>{{end}}
<form method="post" action="{{.Action}}">
<input type="hidden" name="next" value="{{.Next}}">
<label for="key">Key</label>
<input type="password" id="key" name="key" autocomplete="current-password" autofocus required>
<button type="submit" id="submit">Sign in</button>
</form>
</body></html>
`))

func showSignin(w http.ResponseWriter, r *http.Request, next, errText string, status int) {
	noStore(w)
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
	if !strings.Contains(r.Header.Get("Accept"), "text/html") {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(status)
		_, _ = w.Write([]byte("sign in at " + signinPath + " with your key to see this preview\n"))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_ = signinPage.Execute(w, map[string]any{"Action": signinPath, "Next": next, "Error": errText})
}
