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

func (s *Tools) exposePortTool() mcp.Tool {
	auth := "Anyone with the URL can open it until it expires, so share it only with the user."
	if s.opts.PreviewAuth {
		auth = "The user signs in once per browser with their key before seeing it."
	}
	return mcp.NewTool("expose_port",
		mcp.WithDescription(fmt.Sprintf(`Give the user a live preview URL of a web app, API or dev server listening on a TCP port in the sandbox (HTTP, SSE and WebSockets: hot reload works). The URL has its own origin and expires after %s; exposing the port again renews it. %s
Bind the server to 0.0.0.0 or 127.0.0.1 (not only ::1) and detach it: `+"`setsid nohup npm run dev -- --host 0.0.0.0 --port 5173 > /sandbox/dev.log 2>&1 &`"+`. Requests arrive with Host "localhost:<port>". Until something listens, the page says so and retries.`,
			human.Duration(time.Duration(s.opts.PreviewTTL)), auth)),
		title("Expose a sandbox port as a preview URL"),
		mcp.WithNumber("port", mcp.Required(), mcp.Min(1), mcp.Max(65535),
			mcp.Description("The TCP port the app listens on inside the sandbox, e.g. 5173 or 8000.")),
		outputSchema[exposeOutput](),
		hints(false, false, true, true),
	)
}

func (s *Tools) unexposePortTool() mcp.Tool {
	return mcp.NewTool("unexpose_port",
		mcp.WithDescription("End the preview URL of a port made by expose_port (it then answers 404). The app keeps running."),
		title("End a port's preview URL"),
		mcp.WithNumber("port", mcp.Required(), mcp.Min(1), mcp.Max(65535),
			mcp.Description("The port given to expose_port.")),
		outputSchema[unexposeOutput](),
		hints(false, true, true, false),
	)
}

// portArg reads the required port argument.
func portArg(tool string, a args) (int, *mcp.CallToolResult) {
	port, ok, bad := a.integer("port", "a TCP port", 1, 65535)
	if bad != nil {
		return 0, bad.result()
	}
	if !ok {
		return 0, argError(`%s needs "port": the TCP port the app listens on inside the sandbox, a whole number between 1 and 65535, e.g. {"port": 8000}`, tool)
	}
	return int(port), nil
}

// exposePort makes (or renews) the preview of a port and says whether something
// listens there now.
func (s *Tools) exposePort(ctx context.Context, box Box, a args) (*mcp.CallToolResult, error) {
	port, bad := portArg("expose_port", a)
	if bad != nil {
		return bad, nil
	}
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
func (s *Tools) unexposePort(ctx context.Context, _ Box, a args) (*mcp.CallToolResult, error) {
	port, bad := portArg("unexpose_port", a)
	if bad != nil {
		return bad, nil
	}
	was := s.opts.Previews.Unexpose(ctx, port)
	text := fmt.Sprintf("Port %d is no longer exposed; its preview URL now answers 404.", port)
	if !was {
		text = fmt.Sprintf("Port %d was not exposed (or its preview had already expired); nothing to do.", port)
	}
	return mcp.NewToolResultStructured(unexposeOutput{Port: port, WasExposed: was}, text), nil
}
