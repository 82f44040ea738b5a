package mcptools

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
	"go.uber.org/zap"
)

// uploadLinkOutput is the structured result of upload_link.
type uploadLinkOutput struct {
	URL       string    `json:"url" jsonschema:"Upload page for the user; anyone with it can add files until it expires."`
	Directory string    `json:"directory" jsonschema:"Directory in the sandbox where uploaded files land."`
	ExpiresAt time.Time `json:"expires_at"`
	MaxBytes  int64     `json:"max_bytes" jsonschema:"Largest file accepted, in bytes."`
}

// Upload links' defaults and bounds.
const (
	defaultUploadDir = boxapi.WorkDir + "/uploads"
	maxUploadLinkTTL = 7 * 24 * time.Hour // when max_link_ttl is not set
)

// uploadTTLBound is the longest lifetime an upload link may ask for: max_link_ttl, as
// for downloads.
func (s *Tools) uploadTTLBound() time.Duration {
	if s.opts.MaxLinkTTL > 0 {
		return time.Duration(s.opts.MaxLinkTTL)
	}
	return max(time.Duration(s.opts.LinkTTL), maxUploadLinkTTL)
}

// uploadLinkArgs are upload_link's arguments. A link lives at least a minute.
type uploadLinkArgs struct {
	Directory string `json:"directory"`
	ExpiresIn *int64 `json:"expires_in" arg:"min=60" unit:"a number of seconds"` // at most uploadTTLBound
}

func (s *Tools) uploadLinkTool() toolDef[uploadLinkArgs] {
	ttl := time.Duration(s.opts.LinkTTL)
	return define[uploadLinkArgs](mcp.NewTool("upload_link",
		mcp.WithDescription(fmt.Sprintf(`Make a link the user opens to send files from their device into the sandbox: chat attachments never reach it, so call this when the user wants you to work on their own file, and give them the URL. They choose or drag files (up to %s each); scripts can use curl -T file <url>. Files land in the directory (default %s, created if missing); a taken name becomes "name (1).ext", never overwriting. The link expires after %s unless expires_in says otherwise. When the user is done, ls the directory.`,
			human.Size(s.opts.MaxUpload), defaultUploadDir, human.Duration(ttl))),
		title("Let the user upload files into the sandbox"),
		outputSchema[uploadLinkOutput](),
		hints(false, false, false, true),
	), map[string]about{
		"directory": {desc: pathDesc("Where the files land (default "+defaultUploadDir+")", "data")},
		"expires_in": {desc: fmt.Sprintf("Seconds the link stays valid. Default %d (%s), at most %d (%s).",
			int(ttl.Seconds()), human.Duration(ttl), int(s.uploadTTLBound().Seconds()), human.Duration(s.uploadTTLBound())),
			max: bound(s.uploadTTLBound().Seconds())},
	})
}

// uploadLink makes a signed upload page for a directory of the sandbox.
func (s *Tools) uploadLink(ctx context.Context, box Box, _ call, in uploadLinkArgs) (*mcp.CallToolResult, error) {
	dir := in.Directory
	if dir == "" {
		dir = defaultUploadDir
	}
	if strings.ContainsFunc(dir, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return argError(`upload_link needs "directory": a path without control characters, such as %s, got %q`, defaultUploadDir, dir), nil
	}
	dir = path.Clean(inSandbox(dir))
	ttl := time.Duration(s.opts.LinkTTL)
	if in.ExpiresIn != nil {
		ttl = time.Duration(*in.ExpiresIn) * time.Second
	}
	// Creating the directory now lets the model ls it at once and finds a file in the
	// way before the person tries.
	if err := box.MakeDir(ctx, dir); err != nil {
		switch {
		case errors.Is(err, boxapi.ErrImageMissing):
			return mcp.NewToolResultError(box.ImageMissing()), nil
		case errors.Is(err, boxapi.ErrNotDir):
			return argError("%s is not a directory in the sandbox (a file is in the way); choose another directory", dir), nil
		case box.EngineDown(err):
			return mcp.NewToolResultError(engineText(box)), nil
		}
		return mcp.NewToolResultError("The sandbox could not prepare " + dir + ": " + err.Error() + ". Try again; if it keeps failing, the server's container engine (Docker or Kubernetes) needs the operator's attention."), nil
	}
	link, expires := s.opts.Links.Upload(ctx, dir, ttl)
	out := uploadLinkOutput{
		URL:       CallerFrom(ctx).Origin + link,
		Directory: dir,
		ExpiresAt: expires.UTC(),
		MaxBytes:  s.opts.MaxUpload,
	}
	metricUploadLinks.Inc()
	id := CallerFrom(ctx)
	s.opts.Logger.Info("upload link", zap.String("client", id.ClientName), zap.String("client_id", id.ClientID),
		zap.String("person", id.Person), zap.String("container", id.Container),
		zap.String("directory", dir), zap.Time("expires_at", out.ExpiresAt))
	return mcp.NewToolResultStructured(out, fmt.Sprintf(
		"Upload page for %s (files up to %s each, valid until %s). Give this link to the user:\n%s\n"+
			"They can also run: curl -T <file> '%s'\nWhen they are done, run `ls -la %s` to see what arrived.",
		dir, human.Size(out.MaxBytes), out.ExpiresAt.Format(time.RFC3339), out.URL, out.URL, shellWord(dir))), nil
}

// shellWord quotes s for a command line only when it needs it.
func shellWord(s string) string {
	if strings.IndexFunc(s, func(r rune) bool {
		return !(r == '/' || r == '.' || r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
