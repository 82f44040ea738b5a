package links

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/audit"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
	"go.uber.org/zap"
)

// Upload links: the person opens the page (or runs curl -T) to put files into the
// sandbox.

// uploadAssetsPrefix is where the page's script and style live; "_" is never a valid
// token.
const uploadAssetsPrefix = UploadsPrefix + "_/"

// uploadListMax is how many files the page shows.
const uploadListMax = 500

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

// serveUpload answers everything below /uploads/: the page's assets, the page, the
// listing of the directory, and PUT uploads.
func (s *Server) serveUpload(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Referrer-Policy", "no-referrer") // the URL is the capability: never leak it
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	if strings.HasPrefix(r.URL.Path, uploadAssetsPrefix) {
		serveUploadAsset(w, r)
		return
	}
	t, slashless, err := s.signer.verifyUpload(r.URL.EscapedPath(), time.Now())
	switch {
	case errors.Is(err, errLinkExpired):
		metricUploads.WithLabelValues("expired").Inc()
		uploadProblem(w, r, http.StatusGone, "This upload link has expired",
			fmt.Sprintf("The link expired at %s. Ask for a new one in the conversation this link came from.", t.expiry.UTC().Format(time.RFC1123)))
		return
	case err != nil:
		metricUploads.WithLabelValues("invalid").Inc()
		uploadProblem(w, r, http.StatusForbidden, "This upload link is not valid",
			"The link was changed or cut short, or it was signed with a key this server no longer uses. Copy the whole link again, or ask for a new one.")
		return
	case s.opts.Revoked(t.id):
		metricUploads.WithLabelValues("revoked").Inc()
		s.auditUpload(r, t, "", audit.OutcomeDenied, "revoked", 0, time.Now())
		uploadProblem(w, r, http.StatusGone, "This upload link was revoked",
			"The operator of this server revoked the link. Ask for a new one in the conversation this link came from if you still need to send files.")
		return
	case slashless && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		http.Redirect(w, r, r.URL.EscapedPath()+"/", http.StatusPermanentRedirect)
		return
	case r.Method == http.MethodOptions:
		uploadPreflight(w, r, t, slashless)
		return
	case r.Method == http.MethodPut && r.Header.Get("Origin") != "":
		// The upload view of an MCP App runs at an opaque origin: it may read the
		// answer to its PUT (the link is the capability; no cookie is involved).
		hd.Set("Access-Control-Allow-Origin", "*")
	}

	fs := s.filesOf(w, r, t.owner, func(status int, title, text string) { uploadProblem(w, r, status, title, text) })
	if fs == nil {
		return
	}
	switch {
	case r.Method == http.MethodPut && t.name != "" && !slashless:
		s.receiveUpload(w, r, fs, t)
	case r.Method == http.MethodPut:
		uploadProblem(w, r, http.StatusBadRequest, "A file name is needed",
			"PUT the file to the link followed by its name, as `curl -T file.csv <link>` does.")
	case (r.Method == http.MethodGet || r.Method == http.MethodHead) && t.name == "":
		if _, list := r.URL.Query()["list"]; list {
			s.serveUploadList(w, r, fs, t)
			return
		}
		s.serveUploadPage(w, r, t)
	default:
		hd.Set("Allow", "GET, HEAD, PUT")
		uploadProblem(w, r, http.StatusMethodNotAllowed, "Method not allowed",
			"Open the link in a browser to upload, or PUT a file to the link followed by its name (curl -T file <link>).")
	}
}

// uploadPreflight answers a CORS preflight for a PUT of one file to a valid link, so
// that a page of any origin (the sandboxed upload view of an MCP App) can upload
// through it without credentials. Nothing else is opened: pages and listings keep
// the same-origin policy, and an invalid, expired or revoked link was refused before.
func uploadPreflight(w http.ResponseWriter, r *http.Request, t uploadTarget, slashless bool) {
	hd := w.Header()
	if r.Header.Get("Access-Control-Request-Method") != http.MethodPut || t.name == "" || slashless {
		hd.Set("Allow", "GET, HEAD, PUT")
		uploadProblem(w, r, http.StatusForbidden, "Only uploads are allowed across origins",
			"Send a PUT of one file to the link followed by its name.")
		return
	}
	hd.Set("Access-Control-Allow-Origin", "*")
	hd.Set("Access-Control-Allow-Methods", "PUT")
	hd.Set("Access-Control-Allow-Headers", "Content-Type, Accept")
	hd.Set("Access-Control-Max-Age", "600")
	hd.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
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

func (s *Server) serveUploadPage(w http.ResponseWriter, r *http.Request, t uploadTarget) {
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Cache-Control", "no-store")
	hd.Set("Content-Security-Policy", uploadPageCSP)
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	data := uploadPageData{
		Dir:         t.dir,
		URL:         s.opts.Origin(r) + r.URL.EscapedPath(),
		ExpiresISO:  t.expiry.UTC().Format(time.RFC3339),
		ExpiresText: t.expiry.UTC().Format("Mon 2 Jan 2006, 15:04 MST"),
		MaxText:     human.Size(s.opts.MaxUpload),
		MaxBytes:    s.opts.MaxUpload,
	}
	if r.Method == http.MethodHead {
		return
	}
	if err := uploadPageTmpl.Execute(w, data); err != nil {
		s.logger.Debug("writing upload page", zap.Error(err))
	}
}

// UploadedFile is one entry of the listing the page shows.
type UploadedFile struct {
	Name     string    `json:"name"`
	Size     int64     `json:"size"`
	Modified time.Time `json:"modified"`
}

func (s *Server) serveUploadList(w http.ResponseWriter, r *http.Request, fs Files, t uploadTarget) {
	list, err := fs.ListFiles(r.Context(), t.dir, uploadListMax)
	if err != nil {
		s.logger.Warn("listing upload directory", zap.String("directory", t.dir), zap.Error(err))
		uploadProblem(w, r, http.StatusServiceUnavailable, "The sandbox is not reachable", "The directory could not be listed right now. Try again in a minute.")
		return
	}
	files := make([]UploadedFile, 0, len(list))
	for _, e := range list {
		files = append(files, UploadedFile{Name: e.Name, Size: e.Size, Modified: e.ModTime.UTC()})
	}
	writeUploadJSON(w, http.StatusOK, map[string]any{"directory": t.dir, "files": files, "max_bytes": s.opts.MaxUpload})
}

// UploadResult is the answer to a successful PUT.
type UploadResult struct {
	Path    string `json:"path"`
	Name    string `json:"name"`
	Size    int64  `json:"size"`
	Renamed bool   `json:"renamed"`
	Asked   string `json:"asked_name"`
	Message string `json:"message"`
}

// receiveUpload streams one PUT body into the sandbox.
func (s *Server) receiveUpload(w http.ResponseWriter, r *http.Request, fs Files, t uploadTarget) {
	fields := []zap.Field{zap.String("directory", t.dir), zap.String("client_ip", s.opts.ClientIP(r))}
	if r.ContentLength > s.opts.MaxUpload {
		// Refused before reading a byte: with Expect: 100-continue the body is never sent.
		metricUploads.WithLabelValues("too_large").Inc()
		s.logger.Info("upload refused: too large", append(fields, zap.Int64("content_length", r.ContentLength))...)
		uploadProblem(w, r, http.StatusRequestEntityTooLarge, "The file is too large",
			fmt.Sprintf("It has %s; files of up to %s are accepted.", human.Size(r.ContentLength), human.Size(s.opts.MaxUpload)))
		return
	}
	name, changed := boxapi.SanitizeName(t.name)
	if name == "" {
		metricUploads.WithLabelValues("bad_name").Inc()
		uploadProblem(w, r, http.StatusBadRequest, "The file name is not usable",
			fmt.Sprintf("%q has no usable name left once path separators and control characters are removed. Rename the file and try again.", human.Clip(t.name, 100)))
		return
	}
	if changed {
		fields = append(fields, zap.String("sent_name", human.Clip(t.name, 300)))
	}

	begin := time.Now()
	body := &watchedBody{r: r.Body}
	res, err := fs.Upload(r.Context(), t.dir, name, body, boxapi.UploadOptions{Size: r.ContentLength, Max: s.opts.MaxUpload})
	elapsed := time.Since(begin)
	fields = append(fields, zap.String("name", name), zap.Duration("duration", elapsed))
	if err != nil {
		s.auditUpload(r, t, name, audit.OutcomeError, err.Error(), 0, begin)
		s.uploadFailed(w, r, t, body, err, fields)
		return
	}
	metricUploadBytes.Add(float64(res.Size))
	result := "ok"
	if res.Renamed {
		result = "renamed"
	}
	metricUploads.WithLabelValues(result).Inc()
	s.logger.Info("upload", append(fields, zap.String("path", res.Path), zap.Int64("size", res.Size), zap.Bool("renamed", res.Renamed),
		zap.Float64("mb_per_s", float64(res.Size)/1e6/max(elapsed.Seconds(), 1e-6)))...)

	s.auditUpload(r, t, res.Path, audit.OutcomeOK, "", res.Size, begin)

	msg := fmt.Sprintf("Saved %s (%s).", res.Path, human.Size(res.Size))
	switch {
	case res.Renamed:
		msg += fmt.Sprintf(" A file named %s was already there, so this one was saved as %s; nothing was overwritten.", name, res.Name)
	case changed:
		msg += fmt.Sprintf(" The name was cleaned up to %s.", res.Name)
	}
	out := UploadResult{Path: res.Path, Name: res.Name, Size: res.Size, Renamed: res.Renamed, Asked: name, Message: msg}
	w.Header().Set("Cache-Control", "no-store")
	if wantsJSON(r) {
		writeUploadJSON(w, http.StatusCreated, out)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintln(w, msg)
}

func (s *Server) uploadFailed(w http.ResponseWriter, r *http.Request, t uploadTarget, body *watchedBody, err error, fields []zap.Field) {
	fields = append(fields, zap.Int64("received", body.n.Load()), zap.Error(err))
	switch {
	case errors.Is(err, boxapi.ErrTooLarge):
		metricUploads.WithLabelValues("too_large").Inc()
		s.logger.Info("upload refused: too large", fields...)
		uploadProblem(w, r, http.StatusRequestEntityTooLarge, "The file is too large",
			fmt.Sprintf("Files of up to %s are accepted; nothing was saved.", human.Size(s.opts.MaxUpload)))
	case body.failed.Load() || errors.Is(err, io.ErrUnexpectedEOF):
		metricUploads.WithLabelValues("aborted").Inc()
		s.logger.Info("upload aborted", fields...)
		uploadProblem(w, r, http.StatusBadRequest, "The upload was cut off",
			"The connection ended before the whole file arrived; nothing was saved. Try again.")
	case errors.Is(err, boxapi.ErrNotDir):
		metricUploads.WithLabelValues("not_dir").Inc()
		uploadProblem(w, r, http.StatusConflict, "The target is not a directory",
			t.dir+" is a file in the sandbox, not a directory. Ask for a new link in the conversation this link came from.")
	case errors.Is(err, boxapi.ErrBadName):
		// The directory leads (through a symbolic link) to a path that cannot be
		// reported as one line of text; nothing was written.
		metricUploads.WithLabelValues("bad_name").Inc()
		s.logger.Warn("upload refused: unusable directory", fields...)
		uploadProblem(w, r, http.StatusConflict, "The target directory cannot be used",
			t.dir+" leads to a directory whose name has control characters or is not valid text; nothing was saved. Ask for a link to another directory in the conversation this link came from.")
	case errors.Is(err, boxapi.ErrImageMissing):
		metricUploads.WithLabelValues("error").Inc()
		s.logger.Error("upload failed", fields...)
		uploadProblem(w, r, http.StatusServiceUnavailable, "The sandbox is being set up",
			"The sandbox image is not ready yet. Try again in a few minutes.")
	default:
		metricUploads.WithLabelValues("error").Inc()
		s.logger.Error("upload failed", fields...)
		uploadProblem(w, r, http.StatusServiceUnavailable, "The sandbox is not reachable",
			"The file could not be written into the sandbox; nothing was saved. Try again in a minute.")
	}
}

// auditUpload records a PUT to an upload link in the console's activity log.
func (s *Server) auditUpload(r *http.Request, t uploadTarget, path, outcome, errText string, size int64, start time.Time) {
	if r.Method != http.MethodPut {
		return
	}
	args := map[string]string{"directory": t.dir, "name": human.Clip(t.name, 300), "link": t.id}
	if path != "" {
		args["path"] = path
	}
	b, _ := json.Marshal(args)
	s.opts.Audit.Record(audit.Entry{
		Time: start, Client: "link", Person: t.owner, Remote: s.opts.ClientIP(r), Tool: "upload", Args: string(b),
		Outcome: outcome, Error: human.Clip(errText, 300), Bytes: size, DurationMS: float64(time.Since(start).Microseconds()) / 1000,
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
