package mcptools

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
	"go.uber.org/zap"
)

// probeTimeout bounds the check whether something already listens on an exposed port.
const probeTimeout = 10 * time.Second

// unexposeOutput is the structured result of unexpose_port.
type unexposeOutput struct {
	Port       int  `json:"port"`
	WasExposed bool `json:"was_exposed"`
}

// exposeOutput is the structured result of expose_port.
type exposeOutput struct {
	URL       string    `json:"url" jsonschema:"Preview URL for the person to open; its own origin."`
	Port      int       `json:"port"`
	ExpiresAt time.Time `json:"expires_at"`
	Listening bool      `json:"listening" jsonschema:"Something accepted a connection on the port when the URL was made."`
}

// portArg is the port of the preview tools.
type portArg struct {
	Port int `json:"port" arg:"required,min=1,max=65535" unit:"a TCP port" needs:"the port the app listens on inside the sandbox, e.g. {\"port\": 8000}"`
}

func (s *Tools) exposePortTool() toolDef[portArg] {
	auth := "Anyone with the URL can open it until it expires, so share it only with the user."
	if s.opts.PreviewAuth {
		auth = "The user signs in once per browser with their key before seeing it."
	}
	return define[portArg](mcp.NewTool("expose_port",
		mcp.WithDescription(fmt.Sprintf(`Give the user a live preview URL of a web app, API or dev server listening on a TCP port in the sandbox (HTTP, SSE and WebSockets: hot reload works). The URL has its own origin and expires after %s; exposing the port again renews it. %s
Bind the server to 0.0.0.0 or 127.0.0.1 (not only ::1) and detach it: `+"`setsid nohup npm run dev -- --host 0.0.0.0 --port 5173 > /sandbox/dev.log 2>&1 &`"+`. Requests arrive with Host "localhost:<port>". Until something listens, the page says so and retries.`,
			human.Duration(time.Duration(s.opts.PreviewTTL)), auth)),
		title("Expose a sandbox port as a preview URL"),
		outputSchema[exposeOutput](),
		hints(false, false, true, true),
	), map[string]about{"port": {desc: "The TCP port the app listens on inside the sandbox, e.g. 5173 or 8000."}})
}

func (s *Tools) unexposePortTool() toolDef[portArg] {
	return define[portArg](mcp.NewTool("unexpose_port",
		mcp.WithDescription("End the preview URL of a port made by expose_port (it then answers 404). The app keeps running."),
		title("End a port's preview URL"),
		outputSchema[unexposeOutput](),
		hints(false, true, true, false),
	), map[string]about{"port": {desc: "The port given to expose_port."}})
}

// exposePort makes (or renews) the preview of a port and says whether something
// listens there now.
func (s *Tools) exposePort(ctx context.Context, box Box, _ call, in portArg) (*mcp.CallToolResult, error) {
	port := in.Port
	listening := false
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	conn, err := box.DialPort(pctx, port)
	cancel()
	switch {
	case err == nil:
		listening = true
		conn.Close()
	case errors.Is(err, boxapi.ErrImageMissing):
		return mcp.NewToolResultError(box.ImageMissing()), nil
	case !errors.Is(err, boxapi.ErrNoListener):
		s.opts.Logger.Warn("checking an exposed port", zap.Int("port", port), zap.Error(err))
	}
	url, expires := s.opts.Previews.Expose(ctx, port, CallerFrom(ctx).Origin)
	out := exposeOutput{
		URL:       url,
		Port:      port,
		ExpiresAt: expires.UTC(),
		Listening: listening,
	}
	id := CallerFrom(ctx)
	s.opts.Logger.Info("expose_port", zap.Int("port", port), zap.Bool("listening", listening),
		zap.String("client", id.ClientName), zap.String("client_id", id.ClientID),
		zap.String("person", id.Person), zap.String("container", id.Container))
	text := fmt.Sprintf("Preview of port %d, valid until %s:\n%s\n", port, out.ExpiresAt.Format(time.RFC3339), out.URL)
	if listening {
		text += "Something is listening on the port; the user can open the URL now."
	} else {
		text += "Nothing listens on the port yet: start the server bound to 0.0.0.0 or 127.0.0.1 (detached with setsid nohup). Until then the URL shows a page that retries every few seconds."
	}
	if s.opts.PreviewAuth {
		text += " The user signs in with their key the first time."
	}
	return mcp.NewToolResultStructured(out, text), nil
}

// unexposePort ends the preview of a port.
func (s *Tools) unexposePort(ctx context.Context, _ Box, _ call, in portArg) (*mcp.CallToolResult, error) {
	port := in.Port
	was := s.opts.Previews.Unexpose(ctx, port)
	text := fmt.Sprintf("Port %d is no longer exposed; its preview URL now answers 404.", port)
	if !was {
		text = fmt.Sprintf("Port %d was not exposed (or its preview had already expired); nothing to do.", port)
	}
	return mcp.NewToolResultStructured(unexposeOutput{Port: port, WasExposed: was}, text), nil
}
