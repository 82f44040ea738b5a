package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// Client ID metadata documents (draft-ietf-oauth-client-id-metadata-document): a client
// whose client_id is an https URL publishes its metadata there, so it needs no
// registration. Fetching a URL chosen by whoever calls /authorize is a server-side
// request on their behalf, hence the limits below and the address checks.
const (
	metadataFetchTimeout       = 5 * time.Second
	maxMetadataDocument        = 16 << 10
	defaultMetadataCacheTTL    = 10 * time.Minute
	minMetadataCacheTTL        = time.Minute
	maxMetadataCacheTTL        = 24 * time.Hour
	maxCachedMetadataDocuments = 1000
	maxMetadataURLLen          = 1024
)

// errMetadataDocument is wrapped by every reason a metadata document is refused.
var errMetadataDocument = errors.New("client metadata document refused")

// metadataDocument is the part of a client ID metadata document we act on.
type metadataDocument struct {
	ClientID                string          `json:"client_id"`
	ClientName              string          `json:"client_name"`
	RedirectURIs            []string        `json:"redirect_uris"`
	TokenEndpointAuthMethod string          `json:"token_endpoint_auth_method"`
	GrantTypes              []string        `json:"grant_types"`
	ResponseTypes           []string        `json:"response_types"`
	ClientSecret            json.RawMessage `json:"client_secret"`
}

// isMetadataDocumentURL reports whether a client_id names a metadata document rather
// than a registration.
func isMetadataDocumentURL(clientID string) bool {
	return strings.HasPrefix(clientID, "https://") || strings.HasPrefix(clientID, "http://")
}

// Limits on fetching metadata documents, beyond the per-fetch timeout: at most
// maxMetadataFetches run at once for the whole server (more callers are told to try again
// rather than queued), and a failed fetch is remembered for failedMetadataCacheTTL so that
// repeating a bad client_id does not repeat the fetch.
const (
	maxMetadataFetches     = 8
	failedMetadataCacheTTL = time.Minute
)

var (
	// errMetadataFetch is what callers learn when the document could not be fetched: the
	// reason (how a name resolved, which address refused, what it answered) is logged
	// only, because it would tell an unauthenticated caller about the network.
	errMetadataFetch = fmt.Errorf("%w: it could not be fetched from the client_id URL", errMetadataDocument)
	errMetadataBusy  = fmt.Errorf("%w: too many applications are being looked up right now; try again in a few seconds", errMetadataDocument)
)

// fetchFailure is errMetadataFetch with the detail for the log.
type fetchFailure struct{ detail error }

func (f *fetchFailure) Error() string { return errMetadataFetch.Error() }
func (f *fetchFailure) Unwrap() error { return errMetadataFetch }

// metadataFlight is one fetch, shared by every lookup of the same URL that arrives while
// it runs. It is cancelled when all of them have gone, so no fetch outlives the requests
// that wanted it.
type metadataFlight struct {
	done    chan struct{}
	client  *clientRecord
	err     error
	waiters int
	cancel  context.CancelFunc
}

// metadataDocumentClient returns the client described by the document at clientID, from
// the cache or fetched (concurrent lookups of one URL share a single fetch).
func (s *Server) metadataDocumentClient(ctx context.Context, clientID string) (*clientRecord, error) {
	if err := s.checkMetadataURL(clientID); err != nil {
		return nil, err
	}
	if c, err, ok := s.cimd.get(clientID, s.opts.Now()); ok {
		return c, err
	}
	s.cimdMu.Lock()
	f := s.cimdFlights[clientID]
	if f == nil || f.waiters == 0 { // none, or one whose callers all left (cancelled)
		select {
		case s.cimdSlots <- struct{}{}:
		default:
			s.cimdMu.Unlock()
			s.log.Warn("refused a client metadata document lookup: too many fetches at once",
				zap.String("client_id", clientID), zap.Int("limit", maxMetadataFetches))
			return nil, errMetadataBusy
		}
		fctx, cancel := context.WithTimeout(context.Background(), metadataFetchTimeout)
		f = &metadataFlight{done: make(chan struct{}), cancel: cancel}
		s.cimdFlights[clientID] = f
		go s.runMetadataFetch(fctx, clientID, f)
	}
	f.waiters++
	s.cimdMu.Unlock()
	select {
	case <-f.done:
		return f.client, f.err
	case <-ctx.Done():
		s.cimdMu.Lock()
		f.waiters--
		if f.waiters == 0 {
			f.cancel()
		}
		s.cimdMu.Unlock()
		return nil, ctx.Err()
	}
}

// runMetadataFetch runs one flight and caches its outcome: a document for as long as
// its Cache-Control allows, a failure for failedMetadataCacheTTL, nothing when every
// caller went away before it finished.
func (s *Server) runMetadataFetch(ctx context.Context, clientID string, f *metadataFlight) {
	defer func() {
		f.cancel()
		<-s.cimdSlots
		s.cimdMu.Lock()
		if s.cimdFlights[clientID] == f {
			delete(s.cimdFlights, clientID)
		}
		s.cimdMu.Unlock()
		close(f.done)
	}()
	c, ttl, err := s.fetchMetadataDocument(ctx, clientID)
	now := s.opts.Now()
	switch {
	case err == nil:
		f.client = c
		s.cimd.put(clientID, c, nil, now.Add(ttl))
	case errors.Is(ctx.Err(), context.Canceled):
		f.err = errMetadataFetch
	default:
		f.err = err
		var ff *fetchFailure
		if errors.As(err, &ff) {
			s.log.Info("could not fetch a client metadata document", zap.String("client_id", clientID), zap.Error(ff.detail))
		} else {
			s.log.Info("refused client metadata document", zap.String("client_id", clientID), zap.Error(err))
		}
		s.cimd.put(clientID, nil, err, now.Add(failedMetadataCacheTTL))
	}
}

// checkMetadataURL applies the draft's rules to the URL itself: https, a path, no
// fragment, no credentials, no dot segments; and refuses hosts that are obviously local
// before anything is fetched.
func (s *Server) checkMetadataURL(raw string) error {
	if len(raw) > maxMetadataURLLen {
		return fmt.Errorf("%w: the client_id URL is longer than %d bytes", errMetadataDocument, maxMetadataURLLen)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return fmt.Errorf("%w: the client_id is not a valid URL", errMetadataDocument)
	}
	if u.User != nil || u.Fragment != "" || strings.Contains(raw, "#") {
		return fmt.Errorf("%w: the client_id URL must not contain credentials or a fragment", errMetadataDocument)
	}
	if u.Path == "" || u.Path == "/" {
		return fmt.Errorf("%w: the client_id URL must have a path", errMetadataDocument)
	}
	for _, seg := range strings.Split(u.Path, "/") {
		if seg == "." || seg == ".." {
			return fmt.Errorf("%w: the client_id URL must not contain dot segments", errMetadataDocument)
		}
	}
	host := u.Hostname()
	local := strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost")
	if addr, err := netip.ParseAddr(host); err == nil && !isPublicAddr(addr) {
		local = true
	}
	allow := s.opts.AllowPrivateClientMetadataURLs
	switch {
	case local && !allow:
		return fmt.Errorf("%w: the client_id URL points to a local or private address", errMetadataDocument)
	case u.Scheme == "https":
	case u.Scheme == "http" && allow && isLoopbackHost(host):
	default:
		return fmt.Errorf("%w: the client_id URL must use https", errMetadataDocument)
	}
	return nil
}

// fetchMetadataDocument fetches and validates the document, and says how long to cache it.
func (s *Server) fetchMetadataDocument(ctx context.Context, clientID string) (*clientRecord, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, clientID, nil)
	if err != nil {
		return nil, 0, &fetchFailure{err}
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.httpClient.Do(req)
	if err != nil {
		return nil, 0, &fetchFailure{err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// Redirects are not followed: the document must live at the client_id itself.
		return nil, 0, &fetchFailure{fmt.Errorf("the URL answered HTTP %d (redirects are not followed)", resp.StatusCode)}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxMetadataDocument+1))
	if err != nil {
		return nil, 0, &fetchFailure{fmt.Errorf("reading the document: %w", err)}
	}
	if len(body) > maxMetadataDocument {
		return nil, 0, fmt.Errorf("%w: it is larger than %d bytes", errMetadataDocument, maxMetadataDocument)
	}
	var doc metadataDocument
	if err := json.Unmarshal(body, &doc); err != nil {
		// The decoder's message would quote the body: say only what is wrong.
		return nil, 0, fmt.Errorf("%w: it is not a JSON object", errMetadataDocument)
	}
	c, err := clientFromMetadataDocument(clientID, doc)
	if err != nil {
		return nil, 0, err
	}
	c.CreatedAt = s.opts.Now().UTC()
	return c, metadataCacheTTL(resp.Header.Get("Cache-Control")), nil
}

// clientFromMetadataDocument checks that the document describes the client it was
// fetched for and that it is a public client with acceptable redirect URIs.
func clientFromMetadataDocument(clientID string, doc metadataDocument) (*clientRecord, error) {
	if doc.ClientID != clientID {
		return nil, fmt.Errorf("%w: its client_id is not the URL it was fetched from", errMetadataDocument)
	}
	if len(doc.ClientSecret) > 0 {
		return nil, fmt.Errorf("%w: it must not contain a client_secret", errMetadataDocument)
	}
	switch doc.TokenEndpointAuthMethod {
	case "", "none":
	case "private_key_jwt":
		return nil, fmt.Errorf("%w: token_endpoint_auth_method private_key_jwt is not supported here; use none", errMetadataDocument)
	default:
		return nil, fmt.Errorf("%w: token_endpoint_auth_method %q is not allowed; use none", errMetadataDocument, doc.TokenEndpointAuthMethod)
	}
	req := registrationRequest{
		RedirectURIs:  doc.RedirectURIs,
		GrantTypes:    doc.GrantTypes,
		ResponseTypes: doc.ResponseTypes,
		ClientName:    doc.ClientName,
	}
	none := "none"
	req.TokenEndpointAuthMethod = &none
	c, regErr := newClientRecord(req, time.Time{})
	if regErr != nil {
		return nil, fmt.Errorf("%w: %s", errMetadataDocument, regErr.desc)
	}
	c.ID = clientID
	c.metadataDocument = true
	return c, nil
}

// metadataCacheTTL honours Cache-Control max-age within bounds; no-store and no-cache
// get the minimum rather than a fetch per request.
func metadataCacheTTL(cacheControl string) time.Duration {
	ttl := defaultMetadataCacheTTL
	for _, d := range strings.Split(cacheControl, ",") {
		d = strings.ToLower(strings.TrimSpace(d))
		switch {
		case d == "no-store" || d == "no-cache":
			return minMetadataCacheTTL
		case strings.HasPrefix(d, "max-age="):
			if n, err := strconv.Atoi(strings.Trim(d[len("max-age="):], `"`)); err == nil && n >= 0 {
				ttl = time.Duration(n) * time.Second
			}
		}
	}
	return min(max(ttl, minMetadataCacheTTL), maxMetadataCacheTTL)
}

// newMetadataClient is the default client for fetching metadata documents: no proxy
// (it would resolve names where we cannot check them), no redirects, short timeouts, and
// a dialer that checks the address actually connected to, after DNS resolution, so a name
// that resolves to a private address (or changes to one: DNS rebinding) is refused.
func newMetadataClient(allowPrivate bool) *http.Client {
	dialer := &net.Dialer{
		Timeout: metadataFetchTimeout,
		Control: func(network, address string, _ syscall.RawConn) error {
			if allowPrivate {
				return nil
			}
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("refusing to connect to %q: %w", address, err)
			}
			if !isPublicAddr(ap.Addr()) {
				return fmt.Errorf("refusing to connect to non-public address %s", ap.Addr())
			}
			return nil
		},
	}
	return &http.Client{
		Timeout: metadataFetchTimeout,
		Transport: &http.Transport{
			Proxy:                  nil,
			DialContext:            dialer.DialContext,
			TLSHandshakeTimeout:    metadataFetchTimeout,
			ResponseHeaderTimeout:  metadataFetchTimeout,
			MaxResponseHeaderBytes: 16 << 10,
			ForceAttemptHTTP2:      true,
			MaxIdleConns:           10,
			IdleConnTimeout:        30 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// nonPublicPrefixes are ranges that are not reachable public unicast addresses beyond
// what netip's predicates cover.
var nonPublicPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and broadcast
	netip.MustParsePrefix("64:ff9b::/96"),    // NAT64, may embed a private IPv4 address
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64
	netip.MustParsePrefix("2002::/16"),       // 6to4, may embed a private IPv4 address
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("100::/64"),        // discard
}

// isPublicAddr is false for loopback, private, link-local, unspecified, multicast and
// the reserved ranges above.
func isPublicAddr(addr netip.Addr) bool {
	addr = addr.Unmap()
	if !addr.IsValid() || addr.IsLoopback() || addr.IsPrivate() || addr.IsUnspecified() ||
		addr.IsLinkLocalUnicast() || addr.IsLinkLocalMulticast() || addr.IsMulticast() ||
		addr.IsInterfaceLocalMulticast() {
		return false
	}
	for _, p := range nonPublicPrefixes {
		if p.Contains(addr) {
			return false
		}
	}
	return true
}

// metadataCache keeps validated metadata documents in memory, bounded.
type metadataCache struct {
	mu      sync.Mutex
	max     int
	entries map[string]cachedClient
}

type cachedClient struct {
	client  *clientRecord
	err     error // a remembered failure
	expires time.Time
}

func newMetadataCache(maxEntries int) *metadataCache {
	return &metadataCache{max: maxEntries, entries: make(map[string]cachedClient)}
}

// get returns the cached document, or the cached failure, and whether there was either.
func (c *metadataCache) get(id string, now time.Time) (*clientRecord, error, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[id]
	if !ok || !now.Before(e.expires) {
		return nil, nil, false
	}
	return e.client, e.err, true
}

func (c *metadataCache) put(id string, client *clientRecord, err error, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[id]; !ok && len(c.entries) >= c.max {
		// Full: drop an arbitrary entry (map order); a dropped document is simply
		// fetched again when next needed.
		for k := range c.entries {
			delete(c.entries, k)
			break
		}
	}
	c.entries[id] = cachedClient{client: client, err: err, expires: expires}
}
