package links

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/audit"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
	"go.uber.org/zap"
)

// DefaultMaxUpload is the largest file an upload link accepts unless max_upload says
// otherwise: 2 GiB.
const DefaultMaxUpload = 2 << 30

// Files is the sandbox as the links see it.
type Files interface {
	Stat(ctx context.Context, p string) (boxapi.FileInfo, error)
	OpenRange(ctx context.Context, p string, offset, length int64) (*boxapi.File, error)
	WriteZip(ctx context.Context, p string, w io.Writer) error
	ListFiles(ctx context.Context, dir string, max int) ([]boxapi.DirEntry, error)
	Upload(ctx context.Context, dir, name string, r io.Reader, opts boxapi.UploadOptions) (boxapi.UploadResult, error)
}

// Audit records what a link did in the operator's activity log.
type Audit = audit.Recorder

// ErrNoOwner is what FilesOf returns for a link whose owner has no sandbox here (a
// person since removed from the configuration): the link is not valid any more.
var ErrNoOwner = errors.New("the link's owner has no sandbox here")

// Options configure a Server. Every field is required.
type Options struct {
	Signer *Signer
	// FilesOf finds the sandbox of a link's owner: the person it was made for, "" for
	// the operator. A link reaches no other sandbox.
	FilesOf   func(ctx context.Context, owner string) (Files, error)
	MaxUpload int64 // bytes per uploaded file
	// Revoked reports whether the operator revoked the link with this id.
	Revoked func(id string) bool
	Audit   Audit
	// Origin is the scheme and host the person reached this server at; ClientIP the
	// address to log.
	Origin   func(*http.Request) string
	ClientIP func(*http.Request) string
	Logger   *zap.Logger
}

// Server answers download links (/files/...) and upload links (/uploads/...).
type Server struct {
	opts   Options
	signer *Signer
	logger *zap.Logger

	downloads linkLimiter // downloads running per link
	sniffed   sync.Map    // path and ETag -> sniffResult
	sniffedN  atomic.Int64
}

// New makes the links' HTTP side.
func New(o Options) *Server {
	return &Server{opts: o, signer: o.Signer, logger: o.Logger}
}

// Handles reports whether r is for a link.
func (s *Server) Handles(r *http.Request) bool {
	return strings.HasPrefix(r.URL.Path, FilesPrefix) || strings.HasPrefix(r.URL.Path, UploadsPrefix)
}

// ServeHTTP answers a link request; Handles(r) must be true.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, FilesPrefix) {
		s.serveFileAudited(w, r)
		return
	}
	s.serveUpload(w, r)
}

// filesOf finds the sandbox of a link's owner; failing, it answers the request and
// returns nil.
func (s *Server) filesOf(w http.ResponseWriter, r *http.Request, owner string, problem func(status int, title, text string)) Files {
	fs, err := s.opts.FilesOf(r.Context(), owner)
	switch {
	case errors.Is(err, ErrNoOwner):
		problem(http.StatusGone, "This link is no longer valid",
			"The sandbox it leads to is no longer on this server. Ask for a new link.")
	case err != nil:
		s.logger.Warn("finding the sandbox of a link", zap.String("owner", owner), zap.Error(err))
		problem(http.StatusServiceUnavailable, "The sandbox is not reachable", human.Clip(err.Error(), 300)+". Try again later.")
	default:
		return fs
	}
	return nil
}

// countingWriter notes the status and body size of a response.
type countingWriter struct {
	http.ResponseWriter
	status int
	n      int64
}

func (c *countingWriter) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	n, err := c.ResponseWriter.Write(p)
	c.n += int64(n)
	return n, err
}

func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// serveFileAudited serves a download link and records it in the audit log.
func (s *Server) serveFileAudited(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	cw := &countingWriter{ResponseWriter: w}
	s.serveFile(cw, r)
	_, p, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, FilesPrefix), "/")
	args := map[string]string{"path": "/" + p, "link": DownloadID(r.URL.Path)}
	// Only a link whose signature holds is logged under its person: a forged one names
	// whoever its forger chose, so it is logged as forged, under nobody's sandbox.
	owner, _, _, err := s.signer.verifyDownload(r.URL.Path, start)
	if errors.Is(err, errLinkInvalid) {
		owner, args["forged"] = "", "true"
	}
	if r.Method != http.MethodGet {
		args["method"] = r.Method
	}
	b, _ := json.Marshal(args)
	e := audit.Entry{
		Time: start, Client: "link", Person: owner, Remote: s.opts.ClientIP(r), Tool: "download", Args: string(b),
		Outcome: audit.OutcomeOK, Bytes: cw.n, DurationMS: float64(time.Since(start).Microseconds()) / 1000,
	}
	switch {
	case cw.status == http.StatusForbidden || cw.status == http.StatusGone:
		e.Outcome, e.Error = audit.OutcomeDenied, http.StatusText(cw.status)
	case cw.status >= 400:
		e.Outcome, e.Error = audit.OutcomeError, http.StatusText(cw.status)
	}
	s.opts.Audit.Record(e)
}
