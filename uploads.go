package mcpsandbox

import (
	"crypto/hmac"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/console"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/expiry"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/oauth"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// Upload links: the person opens the page (or runs curl -T) to put files into the
// sandbox. Defaults and bounds:
const (
	uploadsPrefix      = "/uploads/"
	uploadAssetsPrefix = uploadsPrefix + "_/" // the page's script and style; "_" is never a valid token
	defaultUploadDir   = sandbox.WorkDir + "/uploads"
	defaultMaxUpload   = 2 << 30            // 2 GiB per file
	maxUploadLinkTTL   = 7 * 24 * time.Hour // when max_link_ttl is not set
	minUploadLinkTTL   = time.Minute
	uploadListMax      = 500 // files shown on the page
)

//go:embed uploadpage
var uploadPageFS embed.FS

var uploadPageTmpl = template.Must(template.ParseFS(uploadPageFS, "uploadpage/upload.html"))

// uploadAsset is one of the page's static files.
type uploadAsset struct {
	body        []byte
	ctype, etag string
}

// uploadAssets are the page's script and style, served from memory.
var uploadAssets = func() map[string]uploadAsset {
	m := map[string]uploadAsset{}
	for name, ctype := range map[string]string{"upload.js": "text/javascript; charset=utf-8", "upload.css": "text/css; charset=utf-8"} {
		b, err := uploadPageFS.ReadFile("uploadpage/" + name)
		if err != nil {
			panic(err)
		}
		sum := sha256.Sum256(b)
		m[name] = uploadAsset{b, ctype, `"` + hex.EncodeToString(sum[:8]) + `"`}
	}
	return m
}()

// uploadPageCSP allows only the page's own script, style and requests, and no framing.
const uploadPageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// uploadSigner makes and checks upload links of the form
//
//	/uploads/<expiry unix seconds>.<signature>/<directory, escaped segment by segment>/
//
// The signature is an HMAC-SHA256 over the expiry and the directory, with a key derived
// from the API key under its own label: a download link's signature never opens an
// upload page, nor the reverse. The link is a capability: whoever holds it may add files
// to that one directory until it expires.
type uploadSigner struct {
	key []byte
}

func newUploadSigner(apiKey string) *uploadSigner {
	return &uploadSigner{key: oauth.DeriveKey(apiKey, "upload links v1")}
}

func (u *uploadSigner) mac(expiry int64, dir string) string {
	m := hmac.New(sha256.New, u.key)
	fmt.Fprintf(m, "%d\n%s", expiry, dir)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// sign returns the link path for dir (absolute, clean), valid until exp.
func (u *uploadSigner) sign(dir string, exp time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s%d.%s/", uploadsPrefix, exp.Unix(), u.mac(exp.Unix(), dir))
	for _, s := range strings.Split(strings.Trim(dir, "/"), "/") {
		if s != "" {
			b.WriteString(escapeSegment(s) + "/")
		}
	}
	return b.String()
}

// uploadTarget is what a request below /uploads/ asks for.
type uploadTarget struct {
	id     string    // names the link in the console, from its signature
	dir    string    // the signed directory
	name   string    // the raw file name after the directory ("" for the page)
	expiry time.Time // when the link expires
}

// verify checks a request path below /uploads/. The last segment is the file name (empty
// for the page itself); the ones before it are the directory. When that reading fails
// and the path does not end in '/', it also tries the whole path as the directory, so
// that redirect can fix a link pasted without its final slash.
func (u *uploadSigner) verify(escapedPath string, now time.Time) (t uploadTarget, slashless bool, err error) {
	rest := strings.TrimPrefix(escapedPath, uploadsPrefix)
	token, p, ok := strings.Cut(rest, "/")
	if !ok {
		return t, false, errLinkInvalid
	}
	expStr, sig, ok := strings.Cut(token, ".")
	exp, good := expiry.Parse(expStr)
	if !ok || !good {
		return t, false, errLinkInvalid
	}
	segs := strings.Split(p, "/")
	for i, s := range segs {
		var perr error
		if segs[i], perr = url.PathUnescape(s); perr != nil {
			return t, false, errLinkInvalid
		}
	}
	check := func(dirSegs []string) (string, bool) {
		dir := path.Clean("/" + strings.Join(dirSegs, "/"))
		return dir, hmac.Equal([]byte(sig), []byte(u.mac(exp, dir)))
	}
	dir, good := check(segs[:len(segs)-1])
	name := segs[len(segs)-1]
	if !good && name != "" {
		if dir, good = check(segs); good {
			slashless, name = true, ""
		}
	}
	if !good {
		return t, false, errLinkInvalid
	}
	t = uploadTarget{id: uploadLinkID(sig), dir: dir, name: name, expiry: time.Unix(exp, 0)}
	if now.After(t.expiry) {
		return t, slashless, errLinkExpired
	}
	return t, slashless, nil
}

// uploadLinkID names an upload link by its signature: the same id for the link made and
// the link used, and never a download link's id.
func uploadLinkID(sig string) string {
	sum := sha256.Sum256([]byte("upload\x00" + sig))
	return hex.EncodeToString(sum[:12])
}

// serveUpload answers everything below /uploads/: the page's assets, the page, the
// listing of the directory, and PUT uploads.
func (h *Handler) serveUpload(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Referrer-Policy", "no-referrer") // the URL is the capability: never leak it
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	if strings.HasPrefix(r.URL.Path, uploadAssetsPrefix) {
		serveUploadAsset(w, r)
		return
	}
	t, slashless, err := h.uploadLinks.verify(r.URL.EscapedPath(), time.Now())
	switch {
	case errors.Is(err, errLinkExpired):
		metricUploads.WithLabelValues("expired").Inc()
		uploadProblem(w, r, http.StatusGone, "This upload link has expired",
			fmt.Sprintf("The link expired at %s. Ask the assistant for a new one (upload_link).", t.expiry.UTC().Format(time.RFC1123)))
		return
	case err != nil:
		metricUploads.WithLabelValues("invalid").Inc()
		uploadProblem(w, r, http.StatusForbidden, "This upload link is not valid",
			"The link was changed or cut short, or it was signed with a key this server no longer uses. Copy the whole link again, or ask for a new one.")
		return
	case h.linkReg.Revoked(t.id):
		metricUploads.WithLabelValues("revoked").Inc()
		h.auditUpload(r, t, "", console.OutcomeDenied, "revoked", 0, time.Now())
		uploadProblem(w, r, http.StatusGone, "This upload link was revoked",
			"The operator of this server revoked the link. Ask the assistant for a new one if you still need to send files.")
		return
	case slashless && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		http.Redirect(w, r, r.URL.EscapedPath()+"/", http.StatusPermanentRedirect)
		return
	}

	switch {
	case r.Method == http.MethodPut && t.name != "" && !slashless:
		h.receiveUpload(w, r, t)
	case r.Method == http.MethodPut:
		uploadProblem(w, r, http.StatusBadRequest, "A file name is needed",
			"PUT the file to the link followed by its name, as `curl -T file.csv <link>` does.")
	case (r.Method == http.MethodGet || r.Method == http.MethodHead) && t.name == "":
		if _, list := r.URL.Query()["list"]; list {
			h.serveUploadList(w, r, t)
			return
		}
		h.serveUploadPage(w, r, t)
	default:
		hd.Set("Allow", "GET, HEAD, PUT")
		uploadProblem(w, r, http.StatusMethodNotAllowed, "Method not allowed",
			"Open the link in a browser to upload, or PUT a file to the link followed by its name (curl -T file <link>).")
	}
}

func serveUploadAsset(w http.ResponseWriter, r *http.Request) {
	a, ok := uploadAssets[strings.TrimPrefix(r.URL.Path, uploadAssetsPrefix)]
	if !ok || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		http.NotFound(w, r)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", a.ctype)
	hd.Set("ETag", a.etag)
	hd.Set("Cache-Control", "public, max-age=300")
	hd.Set("Cross-Origin-Resource-Policy", "same-origin")
	if r.Header.Get("If-None-Match") == a.etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	hd.Set("Content-Length", strconv.Itoa(len(a.body)))
	if r.Method == http.MethodGet {
		_, _ = w.Write(a.body)
	}
}

// uploadPageData fills uploadpage/upload.html.
type uploadPageData struct {
	Dir, URL, ExpiresISO, ExpiresText, MaxText string
	MaxBytes                                   int64
}

func (h *Handler) serveUploadPage(w http.ResponseWriter, r *http.Request, t uploadTarget) {
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Cache-Control", "no-store")
	hd.Set("Content-Security-Policy", uploadPageCSP)
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	data := uploadPageData{
		Dir:         t.dir,
		URL:         h.auth.Origin(r) + r.URL.EscapedPath(),
		ExpiresISO:  t.expiry.UTC().Format(time.RFC3339),
		ExpiresText: t.expiry.UTC().Format("Mon 2 Jan 2006, 15:04 MST"),
		MaxText:     humanSize(h.MaxUpload),
		MaxBytes:    h.MaxUpload,
	}
	if r.Method == http.MethodHead {
		return
	}
	if err := uploadPageTmpl.Execute(w, data); err != nil {
		h.logger.Debug("writing upload page", zap.Error(err))
	}
}

// uploadedFile is one entry of the listing the page shows.
type uploadedFile struct {
	Name     string    `json:"name"`
	Size     int64     `json:"size"`
	Modified time.Time `json:"modified"`
}

func (h *Handler) serveUploadList(w http.ResponseWriter, r *http.Request, t uploadTarget) {
	list, err := h.box.ListFiles(r.Context(), t.dir, uploadListMax)
	if err != nil {
		h.logger.Warn("listing upload directory", zap.String("directory", t.dir), zap.Error(err))
		uploadProblem(w, r, http.StatusServiceUnavailable, "The sandbox is not reachable", "The directory could not be listed right now. Try again in a minute.")
		return
	}
	files := make([]uploadedFile, 0, len(list))
	for _, e := range list {
		files = append(files, uploadedFile{Name: e.Name, Size: e.Size, Modified: e.ModTime.UTC()})
	}
	writeUploadJSON(w, http.StatusOK, map[string]any{"directory": t.dir, "files": files, "max_bytes": h.MaxUpload})
}

// uploadResult is the answer to a successful PUT.
type uploadResult struct {
	Path    string `json:"path"`
	Name    string `json:"name"`
	Size    int64  `json:"size"`
	Renamed bool   `json:"renamed"`
	Asked   string `json:"asked_name"`
	Message string `json:"message"`
}

// receiveUpload streams one PUT body into the sandbox.
func (h *Handler) receiveUpload(w http.ResponseWriter, r *http.Request, t uploadTarget) {
	fields := []zap.Field{zap.String("directory", t.dir), zap.String("client_ip", clientIP(r))}
	if r.ContentLength > h.MaxUpload {
		// Refused before reading a byte: with Expect: 100-continue the body is never sent.
		metricUploads.WithLabelValues("too_large").Inc()
		h.logger.Info("upload refused: too large", append(fields, zap.Int64("content_length", r.ContentLength))...)
		uploadProblem(w, r, http.StatusRequestEntityTooLarge, "The file is too large",
			fmt.Sprintf("It has %s; files of up to %s are accepted.", humanSize(r.ContentLength), humanSize(h.MaxUpload)))
		return
	}
	name, changed := sandbox.SanitizeName(t.name)
	if name == "" {
		metricUploads.WithLabelValues("bad_name").Inc()
		uploadProblem(w, r, http.StatusBadRequest, "The file name is not usable",
			fmt.Sprintf("%q has no usable name left once path separators and control characters are removed. Rename the file and try again.", clip(t.name, 100)))
		return
	}
	if changed {
		fields = append(fields, zap.String("sent_name", clip(t.name, 300)))
	}

	begin := time.Now()
	body := &watchedBody{r: r.Body}
	res, err := h.box.Upload(r.Context(), t.dir, name, body, sandbox.UploadOptions{Size: r.ContentLength, Max: h.MaxUpload})
	elapsed := time.Since(begin)
	fields = append(fields, zap.String("name", name), zap.Duration("duration", elapsed))
	if err != nil {
		h.auditUpload(r, t, name, console.OutcomeError, err.Error(), 0, begin)
		h.uploadFailed(w, r, t, body, err, fields)
		return
	}
	metricUploadBytes.Add(float64(res.Size))
	result := "ok"
	if res.Renamed {
		result = "renamed"
	}
	metricUploads.WithLabelValues(result).Inc()
	h.logger.Info("upload", append(fields, zap.String("path", res.Path), zap.Int64("size", res.Size), zap.Bool("renamed", res.Renamed),
		zap.Float64("mb_per_s", float64(res.Size)/1e6/max(elapsed.Seconds(), 1e-6)))...)

	h.auditUpload(r, t, res.Path, console.OutcomeOK, "", res.Size, begin)

	msg := fmt.Sprintf("Saved %s (%s).", res.Path, humanSize(res.Size))
	switch {
	case res.Renamed:
		msg += fmt.Sprintf(" A file named %s was already there, so this one was saved as %s; nothing was overwritten.", name, res.Name)
	case changed:
		msg += fmt.Sprintf(" The name was cleaned up to %s.", res.Name)
	}
	out := uploadResult{Path: res.Path, Name: res.Name, Size: res.Size, Renamed: res.Renamed, Asked: name, Message: msg}
	w.Header().Set("Cache-Control", "no-store")
	if wantsJSON(r) {
		writeUploadJSON(w, http.StatusCreated, out)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintln(w, msg)
}

func (h *Handler) uploadFailed(w http.ResponseWriter, r *http.Request, t uploadTarget, body *watchedBody, err error, fields []zap.Field) {
	fields = append(fields, zap.Int64("received", body.n.Load()), zap.Error(err))
	switch {
	case errors.Is(err, sandbox.ErrTooLarge):
		metricUploads.WithLabelValues("too_large").Inc()
		h.logger.Info("upload refused: too large", fields...)
		uploadProblem(w, r, http.StatusRequestEntityTooLarge, "The file is too large",
			fmt.Sprintf("Files of up to %s are accepted; nothing was saved.", humanSize(h.MaxUpload)))
	case body.failed.Load() || errors.Is(err, io.ErrUnexpectedEOF):
		metricUploads.WithLabelValues("aborted").Inc()
		h.logger.Info("upload aborted", fields...)
		uploadProblem(w, r, http.StatusBadRequest, "The upload was cut off",
			"The connection ended before the whole file arrived; nothing was saved. Try again.")
	case errors.Is(err, sandbox.ErrNotDir):
		metricUploads.WithLabelValues("not_dir").Inc()
		uploadProblem(w, r, http.StatusConflict, "The target is not a directory",
			t.dir+" is a file in the sandbox, not a directory. Ask the assistant for a new link.")
	case errors.Is(err, sandbox.ErrBadName):
		// The directory leads (through a symbolic link) to a path that cannot be
		// reported as one line of text; nothing was written.
		metricUploads.WithLabelValues("bad_name").Inc()
		h.logger.Warn("upload refused: unusable directory", fields...)
		uploadProblem(w, r, http.StatusConflict, "The target directory cannot be used",
			t.dir+" leads to a directory whose name has control characters or is not valid text; nothing was saved. Ask the assistant for a link to another directory.")
	case errors.Is(err, sandbox.ErrImageMissing):
		metricUploads.WithLabelValues("error").Inc()
		h.logger.Error("upload failed", fields...)
		uploadProblem(w, r, http.StatusServiceUnavailable, "The sandbox is being set up",
			"The sandbox image is not ready yet. Try again in a few minutes.")
	default:
		metricUploads.WithLabelValues("error").Inc()
		h.logger.Error("upload failed", fields...)
		uploadProblem(w, r, http.StatusServiceUnavailable, "The sandbox is not reachable",
			"The file could not be written into the sandbox; nothing was saved. Try again in a minute.")
	}
}

// auditUpload records a PUT to an upload link in the console's activity log.
func (h *Handler) auditUpload(r *http.Request, t uploadTarget, path, outcome, errText string, size int64, start time.Time) {
	if r.Method != http.MethodPut {
		return
	}
	args := map[string]string{"directory": t.dir, "name": clip(t.name, 300), "link": t.id}
	if path != "" {
		args["path"] = path
	}
	b, _ := json.Marshal(args)
	h.audit.Record(console.Entry{
		Time: start, Client: "link", Remote: clientIP(r), Tool: "upload", Args: string(b),
		Outcome: outcome, Error: clip(errText, 300), Bytes: size, DurationMS: float64(time.Since(start).Microseconds()) / 1000,
	})
}

// watchedBody counts what the client sent and remembers whether a read failed (a
// client that went away), to tell an aborted upload from a failing sandbox. Its
// counters may be read while the sandbox's read-ahead still reads.
type watchedBody struct {
	r      io.Reader
	n      atomic.Int64
	failed atomic.Bool
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n.Add(int64(n))
	if err != nil && err != io.EOF {
		b.failed.Store(true)
	}
	return n, err
}

func wantsJSON(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "application/json")
}

func writeUploadJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// uploadProblem answers an error in the form the client reads: JSON for the page's
// script, plain text for curl and scripts, a small page for a browser.
func uploadProblem(w http.ResponseWriter, r *http.Request, status int, title, text string) {
	switch {
	case wantsJSON(r):
		writeUploadJSON(w, status, map[string]string{"error": title + ". " + text})
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		linkPage(w, status, title, text)
	default:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(status)
		fmt.Fprintf(w, "%s. %s\n", title, text)
	}
}
