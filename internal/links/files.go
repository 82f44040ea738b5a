package links

import (
	"errors"
	"fmt"
	"html"
	"io"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"go.uber.org/zap"
)

// Downloads: a share_file link serves one file (with ranges) or a directory as a zip.

// MaxDownloadsPerLink bounds the downloads of one link that run at once: a link posted
// somewhere public must not tie up the sandbox, while a browser's parallel range
// requests for a video still fit.
const MaxDownloadsPerLink = 4

// linkLimiter counts the downloads running per link.
type linkLimiter struct {
	mu      sync.Mutex
	running map[string]int
}

// acquire takes a slot for the link key; ok is false when all are taken.
func (l *linkLimiter) acquire(key string) (release func(), ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running == nil {
		l.running = map[string]int{}
	}
	if l.running[key] >= MaxDownloadsPerLink {
		return nil, false
	}
	l.running[key]++
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.running[key]--; l.running[key] <= 0 {
			delete(l.running, key)
		}
	}, true
}

// serveFile answers a download link: it checks the signature and expiry, then streams
// the file out of the container in bounded memory, with Range and HEAD support. A
// directory is served as a zip made on the fly.
func (s *Server) serveFile(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Content-Type-Options", "nosniff")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hd.Set("Allow", "GET, HEAD")
		linkPage(w, http.StatusMethodNotAllowed, "Method not allowed", "Download links answer GET and HEAD only.")
		return
	}
	owner, p, link, err := s.signer.verifyDownload(r.URL.Path, time.Now())
	switch {
	case errors.Is(err, errLinkExpired):
		metricDownloads.WithLabelValues("expired").Inc()
		linkPage(w, http.StatusGone, "This link has expired",
			fmt.Sprintf("The link expired at %s. Ask for a new one in the conversation this link came from: the file can be shared again.", link.Expires.UTC().Format(time.RFC1123)))
		return
	case err != nil:
		metricDownloads.WithLabelValues("invalid").Inc()
		linkPage(w, http.StatusForbidden, "This link is not valid",
			"The link was changed or cut short, or it was signed with a key this server no longer uses. Copy the whole link again, or ask for a new one.")
		return
	}
	if s.opts.Revoked(link.ID) {
		metricDownloads.WithLabelValues("revoked").Inc()
		linkPage(w, http.StatusGone, "This link was revoked",
			"The operator of this server revoked the link. Ask for a new one if you still need the file.")
		return
	}

	// A valid link may be read by any page, without credentials: it is public to
	// whoever holds it, and share_file's MCP App (an opaque origin) reads a shared
	// page's text to show it in the conversation.
	hd.Set("Access-Control-Allow-Origin", "*")
	fs := s.filesOf(w, r, owner, func(status int, title, text string) { linkPage(w, status, title, text) })
	if fs == nil {
		return
	}
	release, ok := s.downloads.acquire(r.URL.Path)
	if !ok {
		metricDownloads.WithLabelValues("busy").Inc()
		hd.Set("Retry-After", "2")
		linkPage(w, http.StatusTooManyRequests, "Too many downloads at once",
			fmt.Sprintf("This link is being downloaded %d times at the moment, the most it allows. Try again when one has finished.", MaxDownloadsPerLink))
		return
	}
	defer release()

	info, err := fs.Stat(r.Context(), p)
	if errors.Is(err, boxapi.ErrIsDir) {
		s.serveZip(w, r, fs, p)
		return
	}
	if err != nil {
		s.fileError(w, r, p, err)
		return
	}
	etag := fmt.Sprintf(`"%x-%x"`, info.Size, info.ModTime.UnixNano())
	hd.Set("ETag", etag)
	hd.Set("Last-Modified", info.ModTime.UTC().Format(http.TimeFormat))
	hd.Set("Accept-Ranges", "bytes")
	hd.Set("Cache-Control", "private, max-age=0, must-revalidate")
	ctype, inline := s.contentType(r, fs, owner, p, info, etag)
	disposition := "attachment"
	if inline {
		disposition = "inline"
	}
	hd.Set("Content-Type", ctype)
	hd.Set("Content-Disposition", mime.FormatMediaType(disposition, map[string]string{"filename": info.Name}))
	// Nothing served here may run script on this origin: a shared HTML or SVG file is
	// an attachment, and even so the document is sandboxed.
	hd.Set("Content-Security-Policy", downloadCSP())

	start, length, status := int64(0), info.Size, http.StatusOK
	if rg := r.Header.Get("Range"); rg != "" && ifRangeMatches(r, etag, info.ModTime) {
		s, n, ok := parseRange(rg, info.Size)
		switch {
		case !ok:
			hd.Set("Content-Range", fmt.Sprintf("bytes */%d", info.Size))
			metricDownloads.WithLabelValues("bad_range").Inc()
			http.Error(w, "requested range not satisfiable", http.StatusRequestedRangeNotSatisfiable)
			return
		case n >= 0:
			start, length, status = s, n, http.StatusPartialContent
			hd.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", s, s+n-1, info.Size))
		}
	}
	hd.Set("Content-Length", strconv.FormatInt(length, 10))
	if r.Method == http.MethodHead {
		w.WriteHeader(status)
		return
	}

	f, err := fs.OpenRange(r.Context(), p, start, length)
	if err != nil {
		hd.Del("Content-Length")
		hd.Del("Content-Range")
		s.fileError(w, r, p, err)
		return
	}
	defer f.Close()
	w.WriteHeader(status)
	// Large buffers: every read crosses Docker's exec stream and every write a syscall.
	buf := copyBuffers.Get().(*[]byte)
	dw := stallBounded(w)
	n, err := io.CopyBuffer(dw, io.LimitReader(f, length), *buf)
	dw.release()
	copyBuffers.Put(buf)
	if err == nil && n < length {
		err = io.ErrUnexpectedEOF // the file shrank since the stat
	}
	metricDownloadBytes.Add(float64(n))
	if err != nil {
		metricDownloads.WithLabelValues("interrupted").Inc()
		s.logger.Debug("download interrupted", zap.String("path", p), zap.Int64("sent", n), zap.Error(err))
		return
	}
	metricDownloads.WithLabelValues("ok").Inc()
}

func (s *Server) fileError(w http.ResponseWriter, r *http.Request, p string, err error) {
	switch {
	case errors.Is(err, boxapi.ErrNotRegular):
		metricDownloads.WithLabelValues("not_found").Inc()
		linkPage(w, http.StatusNotFound, "Not a regular file",
			"The link is valid, but "+p+" is not a regular file any more (it is a special file, or a symbolic link that leads nowhere). Ask for the file to be shared again.")
	case errors.Is(err, boxapi.ErrNotFound), errors.Is(err, boxapi.ErrIsDir):
		metricDownloads.WithLabelValues("not_found").Inc()
		linkPage(w, http.StatusNotFound, "The file is gone",
			"The link is valid, but "+p+" is no longer a file in the sandbox (idle files are cleaned up). Ask for it to be made and shared again.")
	default:
		metricDownloads.WithLabelValues("error").Inc()
		s.logger.Error("serving download", zap.String("path", p), zap.Error(err))
		linkPage(w, http.StatusServiceUnavailable, "The sandbox is not reachable",
			"The file could not be read from the sandbox right now. Try again in a minute.")
	}
}

// ifRangeMatches reports whether a Range header applies (RFC 9110 If-Range).
func ifRangeMatches(r *http.Request, etag string, mod time.Time) bool {
	ir := r.Header.Get("If-Range")
	if ir == "" {
		return true
	}
	if strings.HasPrefix(ir, `"`) || strings.HasPrefix(ir, "W/") {
		return ir == etag
	}
	t, err := http.ParseTime(ir)
	return err == nil && !mod.Truncate(time.Second).After(t)
}

// parseRange parses a single byte range. It returns n = -1 (serve everything) for
// several ranges or a range form it does not serve, and ok = false when the range is
// not satisfiable.
func parseRange(h string, size int64) (start, n int64, ok bool) {
	spec, found := strings.CutPrefix(strings.TrimSpace(h), "bytes=")
	if !found || strings.Contains(spec, ",") {
		return 0, -1, true
	}
	a, b, found := strings.Cut(strings.TrimSpace(spec), "-")
	if !found {
		return 0, -1, true
	}
	if a == "" { // suffix: the last b bytes
		k, err := strconv.ParseInt(b, 10, 64)
		if err != nil || k < 0 {
			return 0, -1, true
		}
		if k == 0 || size == 0 {
			return 0, 0, false
		}
		k = min(k, size)
		return size - k, k, true
	}
	s, err := strconv.ParseInt(a, 10, 64)
	if err != nil || s < 0 {
		return 0, -1, true
	}
	if s >= size {
		return 0, 0, false
	}
	e := size - 1
	if b != "" {
		if e2, err := strconv.ParseInt(b, 10, 64); err == nil && e2 >= s {
			e = min(e2, size-1)
		} else {
			return 0, -1, true
		}
	}
	return s, e - s + 1, true
}

// linkPage writes a small HTML page that says what went wrong with a link.
func linkPage(w http.ResponseWriter, status int, title, text string) {
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Cache-Control", "no-store")
	hd.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1"><title>%[1]s</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:36rem;margin:4rem auto;padding:0 1rem;color:#1f2328}h1{font-size:1.4rem}p{color:#57606a}</style></head>
<body><h1>%[1]s</h1><p>%[2]s</p></body></html>
`, html.EscapeString(title), html.EscapeString(text))
}

// serveZip streams the directory p as a zip archive made while it is sent. Its size is
// not known beforehand, so there are no ranges.
func (s *Server) serveZip(w http.ResponseWriter, r *http.Request, fs Files, p string) {
	hd := w.Header()
	hd.Set("Content-Type", "application/zip")
	hd.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": boxapi.ZipName(p)}))
	hd.Set("Content-Security-Policy", downloadCSP())
	hd.Set("Cache-Control", "no-store")
	hd.Set("Accept-Ranges", "none")
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return
	}
	dw := stallBounded(w)
	cw := &byteCounter{w: dw}
	err := fs.WriteZip(r.Context(), p, cw)
	dw.release()
	metricDownloadBytes.Add(float64(cw.n))
	switch {
	case err == nil:
		metricDownloads.WithLabelValues("ok").Inc()
	case cw.n == 0:
		s.fileError(w, r, p, err)
	default:
		// Headers are gone; the archive ends without its directory, which every unzip
		// refuses, so a broken download cannot pass for a whole one.
		metricDownloads.WithLabelValues("interrupted").Inc()
		s.logger.Debug("zip download interrupted", zap.String("path", p), zap.Int64("sent", cw.n), zap.Error(err))
	}
}

// byteCounter counts what went through it.
type byteCounter struct {
	w io.Writer
	n int64
}

func (c *byteCounter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// stallTimeout bounds how long one write of a download may wait for the client. A
// client that stops reading (HTTP/2 lets it pause a stream for good) would otherwise
// hold its stream of the sandbox's agent channel, and with it part of that channel's
// budget, forever.
var stallTimeout = 2 * time.Minute

// deadlineWriter sets a write deadline of stallTimeout before each write.
type deadlineWriter struct {
	w  io.Writer
	rc *http.ResponseController
}

func (d deadlineWriter) Write(p []byte) (int, error) {
	_ = d.rc.SetWriteDeadline(time.Now().Add(stallTimeout)) // unsupported: no bound, as before
	return d.w.Write(p)
}

// release clears the deadline, so that a later response on the same connection has none.
func (d deadlineWriter) release() { _ = d.rc.SetWriteDeadline(time.Time{}) }

// stallBounded wraps a download's response writer so that a write the client does not
// take within stallTimeout fails; it hides the writer's ReadFrom, as the copies want.
// Call release when the response is written.
func stallBounded(w http.ResponseWriter) deadlineWriter {
	return deadlineWriter{w: w, rc: http.NewResponseController(w)}
}

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// inlineSniffBytes is how much of a file is read to confirm its type.
const inlineSniffBytes = 512

// contentType decides how a file is served: the type to send and whether the browser
// may show it (inline) rather than save it. Only images, PDFs, audio and video open
// inline, and only when the first bytes agree with the name; the sniffed types are
// cached per file version, so seeking in a video does not read the start again.
func (s *Server) contentType(r *http.Request, fs Files, owner, p string, info boxapi.FileInfo, etag string) (string, bool) {
	if _, ok := inlineFamily(extType(info.Name)); !ok {
		return attachmentType(info.Name), false
	}
	key := owner + "\x00" + p + "\x00" + etag
	if v, ok := s.sniffed.Load(key); ok {
		c := v.(sniffResult)
		return c.ctype, c.inline
	}
	var head []byte
	if f, err := fs.OpenRange(r.Context(), p, 0, inlineSniffBytes); err == nil {
		head, _ = io.ReadAll(io.LimitReader(f, inlineSniffBytes))
		f.Close()
	}
	ctype, inline := servedType(info.Name, head)
	if s.sniffedN.Add(1) > 4096 { // a bound, not an eviction policy
		s.sniffed.Clear()
		s.sniffedN.Store(0)
	}
	s.sniffed.Store(key, sniffResult{ctype, inline})
	return ctype, inline
}

type sniffResult struct {
	ctype  string
	inline bool
}

// servedType is the policy of contentType, given the file's name and first bytes.
func servedType(name string, head []byte) (ctype string, inline bool) {
	fam, ok := inlineFamily(extType(name))
	if !ok || len(head) == 0 {
		return attachmentType(name), false
	}
	sniffed, _, _ := strings.Cut(http.DetectContentType(head), ";")
	if got, ok := inlineFamily(sniffed); !ok || got != fam {
		return attachmentType(name), false
	}
	if fam == "image" || fam == "pdf" {
		return sniffed, true // the bytes say exactly what they are
	}
	return extType(name), true // audio and video: the name is more precise
}

// inlineFamily says whether a type may open inline, and as what.
func inlineFamily(ctype string) (string, bool) {
	switch ctype {
	case "image/png", "image/jpeg", "image/gif", "image/webp", "image/bmp", "image/avif", "image/x-icon", "image/vnd.microsoft.icon":
		return "image", true
	case "application/pdf":
		return "pdf", true
	case "application/ogg":
		return "media", true
	}
	if strings.HasPrefix(ctype, "audio/") || strings.HasPrefix(ctype, "video/") {
		return "media", true
	}
	return "", false
}

// extType is the type the file's extension names, without parameters.
func extType(name string) string {
	t, _, _ := strings.Cut(mime.TypeByExtension(path.Ext(name)), ";")
	return strings.TrimSpace(strings.ToLower(t))
}

// attachmentType is the type sent with a file that is saved, not shown.
func attachmentType(name string) string {
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		return t
	}
	return "application/octet-stream"
}

// downloadCSP is the Content-Security-Policy of every download: nothing may load but
// the file itself, and the document is sandboxed (a unique origin, no script), which
// still lets Chromium show images, media and PDFs.
func downloadCSP() string {
	return "default-src 'none'; img-src 'self'; media-src 'self'; style-src 'unsafe-inline'; sandbox"
}
