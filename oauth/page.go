package oauth

import (
	"bytes"
	"html/template"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// The sign-in and error pages are self-contained: inline CSS, no scripts, no external
// assets, so the Content-Security-Policy can forbid everything else.
var pageTemplates = template.Must(template.New("page").Parse(`{{define "head"}}<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<meta name="robots" content="noindex">
<title>{{.Title}} · MCP Sandbox</title>
<style>
:root{--bg:#f4f5f7;--card:#fff;--text:#16181d;--muted:#5f6673;--line:#e3e6eb;--accent:#2f5bea;--accent-text:#fff;--field:#fff;--err-bg:#fdeceb;--err:#b42318;--chip:#f0f2f5}
@media (prefers-color-scheme:dark){:root{--bg:#0f1115;--card:#181b21;--text:#eceef2;--muted:#9aa1ad;--line:#2a2f38;--accent:#5b7cfa;--field:#11141a;--err-bg:#3a1b1b;--err:#ff8a80;--chip:#20242c}}
*{box-sizing:border-box}
html,body{margin:0;height:100%}
body{background:var(--bg);color:var(--text);font:15px/1.5 -apple-system,BlinkMacSystemFont,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;display:flex;align-items:center;justify-content:center;padding:24px}
main{width:100%;max-width:420px;background:var(--card);border:1px solid var(--line);border-radius:14px;padding:32px 32px 26px;box-shadow:0 1px 2px rgba(16,24,40,.05),0 12px 32px rgba(16,24,40,.08)}
.brand{display:flex;align-items:center;gap:10px;font-weight:600;color:var(--muted);font-size:13px;letter-spacing:.02em;margin-bottom:22px}
.brand svg{flex:none}
h1{font-size:21px;line-height:1.3;margin:0 0 8px;font-weight:650}
p{margin:0 0 16px;color:var(--muted)}
.facts{margin:0 0 20px;border:1px solid var(--line);border-radius:10px;overflow:hidden}
.fact{display:flex;justify-content:space-between;gap:16px;padding:10px 14px;font-size:14px}
.fact+.fact{border-top:1px solid var(--line)}
.fact span:first-child{color:var(--muted);flex:none}
.fact span:last-child{font-weight:500;text-align:right;overflow-wrap:anywhere}
.error{background:var(--err-bg);color:var(--err);border-radius:8px;padding:10px 12px;margin:0 0 16px;font-size:14px;font-weight:500}
label{display:block;font-weight:600;font-size:14px;margin:0 0 6px}
input[type=password]{width:100%;padding:11px 12px;font-size:15px;border:1px solid var(--line);border-radius:8px;background:var(--field);color:var(--text);outline:none}
input[type=password]:focus{border-color:var(--accent);box-shadow:0 0 0 3px rgba(47,91,234,.18)}
button{width:100%;margin-top:16px;padding:11px 14px;font-size:15px;font-weight:600;border:0;border-radius:8px;background:var(--accent);color:var(--accent-text);cursor:pointer}
button:hover{filter:brightness(1.06)}
.foot{margin:18px 0 0;font-size:12.5px;line-height:1.45}
</style>
</head>
<body>
<main>
<div class="brand"><svg width="22" height="22" viewBox="0 0 24 24" aria-hidden="true"><rect x="2" y="3" width="20" height="18" rx="4" fill="var(--accent)"/><path d="M7 9l3 3-3 3M12.5 15H17" stroke="#fff" stroke-width="2" fill="none" stroke-linecap="round" stroke-linejoin="round"/></svg>MCP Sandbox · {{.ServerHost}}</div>
{{end}}

{{define "signin"}}{{template "head" .}}
<h1>Allow <span id="client-name">{{.ClientName}}</span> to use your sandbox?</h1>
<p>It will be able to run any command in the sandbox and read the files there.</p>
<div class="facts">
<div class="fact"><span>Application</span><span>{{.ClientName}}</span></div>
{{if .ClientHost}}<div class="fact"><span>Published by</span><span>{{.ClientHost}}</span></div>{{end}}
<div class="fact"><span>Returns to</span><span id="redirect-host">{{.RedirectHost}}</span></div>
</div>
{{if .Error}}<div class="error" id="error" role="alert">{{.Error}}</div>{{end}}
<form method="post" action="/authorize" autocomplete="off">
{{range .Hidden}}<input type="hidden" name="{{.Name}}" value="{{.Value}}">
{{end}}<label for="api_key">Your key</label>
<input id="api_key" name="api_key" type="password" required autofocus autocomplete="current-password" spellcheck="false">
<button type="submit" id="submit">Sign in and allow</button>
</form>
<p class="foot">Only continue if you are connecting {{.ClientName}} yourself right now. Your key goes to this server only; the application never sees it.</p>
</main>
</body>
</html>
{{end}}

{{define "error"}}{{template "head" .}}
<h1>{{.Title}}</h1>
<p class="error" id="error" role="alert">{{.Error}}</p>
<p class="foot">You can close this window.</p>
</main>
</body>
</html>
{{end}}`))

type hiddenField struct{ Name, Value string }

type pageData struct {
	Title        string
	ServerHost   string
	ClientName   string
	ClientHost   string
	RedirectHost string
	Error        string
	Hidden       []hiddenField
}

// renderSignin shows the sign-in form for a validated request, with an error when the
// previous attempt failed.
func (s *Server) renderSignin(w http.ResponseWriter, r *http.Request, req *authRequest, status int, errMsg string) {
	hidden := make([]hiddenField, 0, len(authParams)+1)
	for _, k := range authParams {
		if v := req.params.Get(k); v != "" {
			hidden = append(hidden, hiddenField{k, v})
		}
	}
	hidden = append(hidden, hiddenField{"csrf", s.formToken(req.params, s.opts.Now().Add(signinFormTTL))})
	data := pageData{
		Title:        "Sign in",
		ServerHost:   hostOf(s.Origin(r)),
		ClientName:   req.client.displayName(),
		RedirectHost: redirectHost(req.redirectURI),
		Error:        errMsg,
		Hidden:       hidden,
	}
	if req.client.metadataDocument {
		data.ClientHost = hostOf(req.client.ID)
	}
	s.writePage(w, r, req, status, "signin", data)
}

// renderError shows an error page; req is nil when the request is not trusted enough to
// name a redirect target.
func (s *Server) renderError(w http.ResponseWriter, r *http.Request, req *authRequest, e *pageError) {
	s.writePage(w, r, req, e.status, "error", pageData{
		Title:      e.title,
		ServerHost: hostOf(s.Origin(r)),
		Error:      e.message,
	})
}

func (s *Server) writePage(w http.ResponseWriter, r *http.Request, req *authRequest, status int, name string, data pageData) {
	var buf bytes.Buffer
	if err := pageTemplates.ExecuteTemplate(&buf, name, data); err != nil {
		s.log.Error("rendering the sign-in page", zap.Error(err))
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	formAction := "'self'"
	if req != nil {
		formAction += " " + cspSource(req.redirectURI)
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	// form-action must allow the 303 after the POST: Chrome applies it to the redirect
	// target too.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "+
		"form-action "+formAction+"; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set("Pragma", "no-cache")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(buf.Bytes())
	}
}

// cspSource is a CSP source expression that allows navigating to the redirect URI:
// its origin for http(s) (host in punycode), its scheme for a private-use scheme. IPv6
// literals cannot be written as a CSP host, so they fall back to the scheme. The redirect
// URI was validated (validateRedirectURI), and the result is checked once more here so
// that nothing but a plain source expression can reach the header.
func cspSource(redirectURI string) string {
	u, err := url.Parse(redirectURI)
	if err != nil || u.Scheme == "" {
		return ""
	}
	scheme := strings.ToLower(u.Scheme)
	src := scheme + ":"
	if (scheme == "http" || scheme == "https") && u.Host != "" && !strings.HasPrefix(u.Host, "[") {
		src = scheme + "://" + displayHost(u)
	}
	if !cspSourcePattern.MatchString(src) {
		return ""
	}
	return src
}

// cspSourcePattern is the shape of every source cspSource may return.
var cspSourcePattern = regexp.MustCompile(`^[a-z][a-z0-9+.-]*:(//[a-z0-9_.-]+(:[0-9]{1,5})?)?$`)

// displayHost is u's host[:port] with the name in its ASCII (punycode) form, so that a
// look-alike such as "claude.аi" (with a Cyrillic а) shows as "claude.xn--i-7sb", never as the
// name it imitates.
func displayHost(u *url.URL) string {
	host := u.Hostname()
	if _, err := netip.ParseAddr(host); err != nil {
		if ascii, err := asciiHost(host); err == nil {
			host = ascii
		} else {
			host = strings.ToLower(host)
		}
	} else if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if p := u.Port(); p != "" {
		return host + ":" + p
	}
	return host
}

// redirectHost is how the page tells the person where they will return to.
func redirectHost(redirectURI string) string {
	u, err := url.Parse(redirectURI)
	if err != nil {
		return redirectURI
	}
	switch {
	case u.Scheme == "http" || u.Scheme == "https":
		if addr, err := netip.ParseAddr(u.Hostname()); (err == nil && addr.IsLoopback()) || u.Hostname() == "localhost" {
			return displayHost(u) + " (this computer)"
		}
		return displayHost(u)
	case u.Host != "":
		return u.Scheme + "://" + displayHost(u)
	default:
		return u.Scheme + ": (an app on this computer)"
	}
}

func hostOf(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return rawURL
	}
	return displayHost(u)
}
