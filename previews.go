package mcpsandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/metrics"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/preview"
)

// defaultPreviewTTL is how long an exposed port stays reachable unless preview_ttl
// says otherwise.
const defaultPreviewTTL = 24 * time.Hour

// provisionPreviews sets up the preview server when `previews` is configured. It does
// no Docker I/O: relays are made per connection when a person opens a preview.
func (h *Handler) provisionPreviews(ctx caddy.Context) error {
	if h.PreviewTTL == 0 {
		h.PreviewTTL = caddy.Duration(defaultPreviewTTL)
	}
	if h.PreviewTTL < 0 {
		return errors.New("preview_ttl must be positive")
	}
	if h.PublicURL != "" {
		u, _ := url.Parse(h.PublicURL)
		d, err := preview.NormalizeDomain(h.Previews)
		if err != nil {
			return err
		}
		if err := preview.CheckSiteHost(d, u.Hostname()); err != nil {
			return err
		}
	}
	srv, err := preview.New(preview.Options{
		Domain:   h.Previews,
		Owners:   h.previewOwners,
		TTL:      time.Duration(h.PreviewTTL),
		Dial:     h.dialPreview,
		Auth:     h.PreviewAuth,
		APIKey:   h.APIKey,
		Guesses:  h.guesses,
		ClientIP: clientIP,
		Storage:  h.storage,
		Observe: func(result string, n int64) {
			metrics.PreviewRequests.WithLabelValues(result).Inc()
			metrics.PreviewBytes.Add(float64(n))
		},
		Logger: h.logger.Named("preview"),
	})
	if err != nil {
		return err
	}
	if err := srv.Provision(ctx); err != nil {
		return err
	}
	h.Previews = srv.Domain()
	h.previews = srv
	if srv.Domain() == "localhost" {
		h.logger.Debug("previews on localhost: for local development only")
	}
	return nil
}

// dialPreview opens one upstream connection of the preview proxy: a relay into the
// loopback of the owner's container, made through the Docker API, that keeps the
// owner's sandbox from idle stop while in use (fleet.Entry.DialPort).
func (h *Handler) dialPreview(ctx context.Context, owner string, port int) (net.Conn, error) {
	person, ok := h.personOfOwner(owner)
	if !ok {
		return nil, errors.New("the preview's sandbox is no longer on this server")
	}
	e, err := h.fleet.For(ctx, person)
	if err != nil {
		return nil, err
	}
	c, err := e.DialPort(ctx, port)
	if errors.Is(err, boxapi.ErrNoListener) {
		return nil, fmt.Errorf("%w: %w", preview.ErrNoListener, err)
	}
	if err != nil {
		h.logger.Warn("preview relay failed", zap.Int("port", port), zap.Error(err))
		return nil, err
	}
	return c, nil
}
