// Package egress is the sandbox's way out: an allow-list policy over host names and
// ports, and an HTTP proxy that serves any [net.Conn] under it. The sandbox has no
// network of its own; a program in it talks to the proxy (CONNECT or an absolute URL),
// and the proxy decides, dials, and relays.
//
//	pol, err := egress.Compile(egress.Rules{Allow: []string{"pypi.org", "*.github.com"}})
//	px := &egress.Proxy{Policy: func() *egress.Policy { return pol }}
//	go px.ServeConn(conn) // each connection a program in the sandbox makes
//
// A [Gateway] is one sandbox's proxy kept listening in it, over a small [Sandbox]
// interface, with its CA and the refusals it made.
//
// The package knows nothing of Docker or Caddy's configuration; the plugin feeds it
// connections and rules.
package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Rules are the operator's egress settings as written. Several Rules (the site's, later
// a person's) combine with [Rules.Merge] before [Compile].
type Rules struct {
	// Allow lists the reachable hosts: "example.com", "*.example.com" (subdomains, not
	// the name itself), "example.com:8443" (that port only; without a port, 80 and 443),
	// "*" (every public host, never a name Hosts maps to a private, local or own
	// address), or an IP literal of a public address.
	Allow []string
	// Deny lists hosts refused even when Allow matches them, in the same forms.
	Deny []string
	// Hosts maps names to addresses instead of DNS. A mapped address may be private or
	// loopback: naming it here is how an operator opens it on purpose.
	Hosts map[string]string
	// AskMapped names the names of Hosts that may be put to the person (`ask`) when
	// they map to a private, local or own address and no allow entry names them: those
	// of the sandbox's own block. A site-wide mapping that only some people's blocks
	// allow stays closed to the others, whatever they answer.
	AskMapped []string
	// Credentials are added to requests that match their URL prefix.
	Credentials []Credential
}

// Credential adds a header to requests whose URL starts with Prefix (scheme, host,
// optional port and path). The value never reaches the sandbox, but an upstream that
// echoes request headers shows it there: TRACE and TRACK to a credential host are
// refused, other echoes are the operator's to avoid. One credential applies per
// request, the longest prefix. A prefix with a path is matched on the decoded path,
// which is what goes upstream; where a host's credentials are scoped to paths, a path
// that some server could read as another (dot segments, an encoded slash, backslash,
// dot or %, control characters, overlong UTF-8, compatibility forms of '.' and '/')
// is refused: see resolvedPath.
type Credential struct {
	Prefix string
	Header string // e.g. "Authorization"
	Value  string
}

// Merge returns r with more's rules added: both allow lists, both deny lists (a deny
// from either wins), both credential lists (more's first, so they win on the same
// prefix), and both host maps (more's on a clash).
func (r Rules) Merge(more Rules) Rules {
	out := Rules{
		Allow:       append(slices.Clone(r.Allow), more.Allow...),
		Deny:        append(slices.Clone(r.Deny), more.Deny...),
		Credentials: append(slices.Clone(more.Credentials), r.Credentials...),
		Hosts:       map[string]string{},
		AskMapped:   append(slices.Clone(r.AskMapped), more.AskMapped...),
	}
	for k, v := range r.Hosts {
		out.Hosts[k] = v
	}
	for k, v := range more.Hosts {
		out.Hosts[k] = v
	}
	return out
}

// Policy is compiled Rules: safe for concurrent use, never changed once made. A config
// reload makes a new one.
type Policy struct {
	allow, deny []pattern
	hosts       map[string]netip.Addr
	askMapped   map[string]bool // names of hosts that may be asked about though mapped inside
	creds       []credential
}

// pattern is one allow or deny entry: a host (or "*.suffix", or every host) and a port
// (0: the defaults for allow, every port for deny).
type pattern struct {
	host     string // normalized name or IP literal; for a wildcard the suffix with its dot (".github.com")
	wildcard bool
	any      bool
	port     int
}

type credential struct {
	scheme, host string
	port         int
	path         string
	header       string
	value        string
}

// DefaultPorts are the ports an allow entry without a port opens.
var DefaultPorts = []int{80, 443}

// Compile checks rules and returns the policy, or every problem found, each naming the
// entry. A credential for a host the allow list does not reach is an error.
func Compile(r Rules) (*Policy, error) {
	var errs []error
	p := &Policy{hosts: map[string]netip.Addr{}, askMapped: map[string]bool{}}
	for _, name := range r.AskMapped {
		if h, err := NormalizeHost(name); err == nil {
			p.askMapped[h] = true
		}
	}
	for _, s := range r.Allow {
		pt, err := parsePattern(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("allow %s: %w", s, err))
			continue
		}
		if !pt.wildcard && !pt.any {
			if a, err := netip.ParseAddr(pt.host); err == nil && !Public(a) {
				errs = append(errs, fmt.Errorf("allow %s: %s is not a public address; to open it on purpose, give it a name with host NAME %s and allow NAME", s, a, a))
				continue
			}
		}
		p.allow = append(p.allow, pt)
	}
	for _, s := range r.Deny {
		pt, err := parsePattern(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("deny %s: %w", s, err))
			continue
		}
		p.deny = append(p.deny, pt)
	}
	names := make([]string, 0, len(r.Hosts))
	for k := range r.Hosts {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, name := range names {
		addr := r.Hosts[name]
		h, err := NormalizeHost(name)
		if err == nil {
			if _, e := netip.ParseAddr(h); e == nil {
				err = errors.New("is an IP address, not a name")
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("host %s: %w", name, err))
			continue
		}
		a, err := netip.ParseAddr(addr)
		if err != nil || a.Zone() != "" {
			errs = append(errs, fmt.Errorf("host %s %s: the address must be an IPv4 or IPv6 address", name, addr))
			continue
		}
		p.hosts[h] = a.Unmap()
	}
	for _, c := range r.Credentials {
		cr, err := parseCredential(c)
		if err != nil {
			errs = append(errs, fmt.Errorf("credential %s: %w", c.Prefix, err))
			continue
		}
		if p.Check(cr.host, cr.port) != nil {
			errs = append(errs, fmt.Errorf("credential %s: %s:%d is not allowed by the allow list; allow it, or remove the credential", c.Prefix, cr.host, cr.port))
			continue
		}
		p.creds = append(p.creds, cr)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

func parsePattern(s string) (pattern, error) {
	if s == "*" {
		return pattern{any: true}, nil
	}
	host, port, err := splitHostPort(s)
	if err != nil {
		return pattern{}, err
	}
	if host == "*" {
		return pattern{any: true, port: port}, nil
	}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		h, err := NormalizeHost(rest)
		if err != nil {
			return pattern{}, err
		}
		if _, e := netip.ParseAddr(h); e == nil {
			return pattern{}, errors.New("a wildcard cannot precede an IP address")
		}
		if !strings.Contains(h, ".") {
			return pattern{}, fmt.Errorf("*.%s covers a whole top-level domain; write * to allow every host", h)
		}
		return pattern{host: "." + h, wildcard: true, port: port}, nil
	}
	h, err := NormalizeHost(host)
	if err != nil {
		return pattern{}, err
	}
	return pattern{host: h, port: port}, nil
}

// splitHostPort splits "host", "host:port", "[v6]" and "[v6]:port"; port 0 means none.
func splitHostPort(s string) (string, int, error) {
	host, portStr := s, ""
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", 0, errors.New("an IPv6 address in brackets lacks its ]")
		}
		host, portStr = s[1:end], s[end+1:]
		if portStr != "" {
			p, ok := strings.CutPrefix(portStr, ":")
			if !ok {
				return "", 0, errors.New("unexpected text after ]")
			}
			portStr = p
			if portStr == "" {
				return "", 0, errors.New("empty port")
			}
		}
		if _, err := netip.ParseAddr(host); err != nil || !strings.Contains(host, ":") {
			return "", 0, errors.New("brackets hold only an IPv6 address")
		}
	} else if a, err := netip.ParseAddr(s); err == nil && a.Is6() {
		host = s
	} else if i := strings.LastIndexByte(s, ':'); i >= 0 {
		if strings.Count(s, ":") > 1 {
			return "", 0, errors.New("an IPv6 address with a port must be in brackets: [addr]:port")
		}
		host, portStr = s[:i], s[i+1:]
		if portStr == "" {
			return "", 0, errors.New("empty port")
		}
	}
	port := 0
	if portStr != "" {
		n, err := strconv.Atoi(portStr)
		if err != nil || n < 1 || n > 65535 || portStr[0] == '0' || portStr[0] == '+' {
			return "", 0, fmt.Errorf("port %q is not a number from 1 to 65535", portStr)
		}
		port = n
	}
	return host, port, nil
}

// NormalizeHost returns host in the one spelling the policy compares: lower case, no
// trailing dot, an IP literal in its canonical form (IPv4-mapped IPv6 as IPv4). It
// refuses what is not a DNS name of letters, digits and hyphens or an IP literal:
// internationalized names must come in punycode (xn--...), and wildcards are not hosts.
func NormalizeHost(host string) (string, error) {
	if host == "" {
		return "", errors.New("empty host")
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return "", errors.New("an address with a zone is not allowed")
		}
		return a.Unmap().String(), nil
	}
	h := strings.TrimSuffix(host, ".")
	if len(h) == 0 || len(h) > 253 {
		return "", errors.New("a host name has 1 to 253 characters")
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" {
			return "", errors.New("empty label (two dots in a row, or a leading dot)")
		}
		if len(label) > 63 {
			return "", errors.New("a label is longer than 63 characters")
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return "", errors.New("a label starts or ends with a hyphen")
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			switch {
			case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-':
			case c >= 'A' && c <= 'Z':
			case c == '*':
				return "", errors.New("a wildcard is allowed only as the whole first label (*.example.com)")
			case c >= 0x80:
				return "", errors.New("internationalized names must be written in punycode (xn--...)")
			default:
				return "", fmt.Errorf("character %q is not allowed in a host name", c)
			}
		}
	}
	// All-numeric names that are not valid IPs (1.2.3, 0x7f.1) are shorthand some
	// resolvers read as addresses: refused rather than guessed at.
	h = strings.ToLower(h)
	last := h[strings.LastIndexByte(h, '.')+1:]
	if strings.Trim(last, "0123456789") == "" || strings.HasPrefix(last, "0x") {
		return "", errors.New("looks like an IP address but is not one in standard form")
	}
	return h, nil
}

// Refusal is why the policy refused a host: the error every refused request carries.
type Refusal struct {
	Host   string // the host as normalized, or as asked when it could not be
	Port   int
	Reason string // short, for the 403 body and the model: "not allowed by the operator"
}

// badHost is the refusal of a host that is no valid name: shown quoted, in ASCII, cut
// short, since it comes from the sandbox.
func badHost(host string, port int) *Refusal {
	q := strconv.QuoteToASCII(host)
	if len(q) > 80 {
		q = q[:80] + "..."
	}
	return &Refusal{Host: q, Port: port, Reason: ReasonBadHost}
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("blocked: %s (%s)", r.Host, r.Reason)
}

// Reasons a Refusal gives.
const (
	ReasonNotAllowed = "not allowed by the operator"
	ReasonDenied     = "denied by the operator"
	ReasonPort       = "port not allowed by the operator"
	ReasonPrivate    = "resolves to a private or local address"
	ReasonBadHost    = "not a valid host name"
	// ReasonMappedInside: a host line maps the name to a private or local address,
	// which `allow *` does not open; an allow line naming the host does.
	ReasonMappedInside = "mapped to a private or local address that only an allow entry naming it opens"
)

// Check says whether host (normalized or not) on port may be reached by name; nil means
// allowed. It does not resolve: the address check happens when dialing.
func (p *Policy) Check(host string, port int) error {
	h, err := NormalizeHost(host)
	if err != nil {
		return badHost(host, port)
	}
	for _, d := range p.deny {
		if d.matchesHost(h) && (d.port == 0 || d.port == port) {
			return &Refusal{Host: h, Port: port, Reason: ReasonDenied}
		}
	}
	// A name that a host line maps to a private, local or own address is opened only
	// by an allow entry that names it: `*` means the public internet.
	inside := false
	if a, ok := p.hosts[h]; ok {
		inside = !Public(a) || ownAddr(a)
	}
	hostOK, anyOnly := false, false
	for _, a := range p.allow {
		if !a.matchesHost(h) {
			continue
		}
		if a.any && inside {
			anyOnly = true
			continue
		}
		hostOK = true
		if a.port == port || a.port == 0 && slices.Contains(DefaultPorts, port) {
			return nil
		}
	}
	switch {
	case hostOK:
		return &Refusal{Host: h, Port: port, Reason: ReasonPort}
	case anyOnly:
		return &Refusal{Host: h, Port: port, Reason: ReasonMappedInside}
	}
	return &Refusal{Host: h, Port: port, Reason: ReasonNotAllowed}
}

func (pt pattern) matchesHost(h string) bool {
	switch {
	case pt.any:
		return true
	case pt.wildcard:
		return strings.HasSuffix(h, pt.host)
	default:
		return h == pt.host
	}
}

// Summary is the allow list as the model should read it, e.g. "pypi.org, *.github.com,
// example.com:8443"; "" when nothing is allowed.
func (p *Policy) Summary() string {
	var out []string
	for _, a := range p.allow {
		s := a.host
		switch {
		case a.any:
			s = "any public host"
		case a.wildcard:
			s = "*" + a.host
		}
		if a.port != 0 {
			s += ":" + strconv.Itoa(a.port)
		}
		out = append(out, s)
	}
	if len(p.deny) > 0 && len(out) > 0 {
		var d []string
		for _, x := range p.deny {
			s := x.host
			if x.wildcard {
				s = "*" + x.host
			}
			if x.any {
				s = "*"
			}
			if x.port != 0 {
				s += ":" + strconv.Itoa(x.port)
			}
			d = append(d, s)
		}
		return strings.Join(out, ", ") + " (except " + strings.Join(d, ", ") + ")"
	}
	return strings.Join(out, ", ")
}

// Askable says whether a refusal of host as not allowed may be put to the person: not
// for a name a host rule maps to a private, local or own address, unless the sandbox's
// own block mapped it (Rules.AskMapped). An answer must not open an inside address the
// operator mapped for other people.
func (p *Policy) Askable(host string) bool {
	h, err := NormalizeHost(host)
	if err != nil {
		return false
	}
	a, ok := p.hosts[h]
	if !ok {
		// An address the proxy never dials (loopback, private, this machine's own)
		// could not open whatever the person said: no question about it.
		if ip, err := netip.ParseAddr(h); err == nil {
			return Public(ip) && !ownAddr(ip)
		}
		return true
	}
	if Public(a) && !ownAddr(a) {
		return true
	}
	return p.askMapped[h]
}

// Mapped returns the address a host rule gives name, if any.
func (p *Policy) Mapped(name string) (netip.Addr, bool) {
	a, ok := p.hosts[name]
	return a, ok
}

// Public says whether a may be dialled without a host mapping: not loopback, private
// (RFC 1918, fc00::/7), shared (100.64.0.0/10), link-local, multicast, unspecified or
// reserved. An IPv6 address that carries an IPv4 one is judged by the IPv4 address
// (IPv4-mapped, NAT64 64:ff9b::/96, 6to4 2002::/16), or refused outright where the
// form is deprecated or local (IPv4-compatible ::/96, IPv4-translated, local NAT64
// 64:ff9b:1::/48, Teredo 2001::/32): a gateway on the way may turn any of them into
// the IPv4 address, loopback included.
func Public(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() ||
		a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(a) {
			return false
		}
	}
	if a.Is6() {
		b := a.As16()
		switch {
		case nat64.Contains(a):
			return Public(netip.AddrFrom4([4]byte(b[12:16])))
		case sixToFour.Contains(a):
			return Public(netip.AddrFrom4([4]byte(b[2:6])))
		}
	}
	return true
}

var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("::/96"),           // IPv4-compatible (::a.b.c.d), deprecated
	netip.MustParsePrefix("::ffff:0:0:0/96"), // IPv4-translated (SIIT)
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64
	netip.MustParsePrefix("100::/64"),
	netip.MustParsePrefix("2001::/32"), // Teredo
	netip.MustParsePrefix("2001:db8::/32"),
	netip.MustParsePrefix("fec0::/10"),
}

func parseCredential(c Credential) (credential, error) {
	scheme, rest, ok := strings.Cut(c.Prefix, "://")
	if !ok || (scheme != "http" && scheme != "https") {
		return credential{}, errors.New("the prefix must start with http:// or https://")
	}
	hostport, path := rest, "/"
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		hostport, path = rest[:i], rest[i:]
	}
	if strings.ContainsAny(path, "?#") || strings.ContainsFunc(path, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
		return credential{}, errors.New("the path may not hold a query, a fragment, spaces or control characters")
	}
	if strings.Contains(hostport, "@") {
		return credential{}, errors.New("the prefix may not hold a user name")
	}
	host, port, err := splitHostPort(hostport)
	if err != nil {
		return credential{}, err
	}
	h, err := NormalizeHost(host)
	if err != nil {
		return credential{}, err
	}
	if port == 0 {
		port = 80
		if scheme == "https" {
			port = 443
		}
	}
	if !validHeaderName(c.Header) {
		return credential{}, fmt.Errorf("header name %q is not a valid HTTP header name", c.Header)
	}
	if c.Value == "" || strings.ContainsAny(c.Value, "\r\n\x00") {
		return credential{}, errors.New("the value is empty or holds a line break")
	}
	return credential{scheme: scheme, host: h, port: port, path: path, header: c.Header, value: c.Value}, nil
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// credentialHost says whether some credential is added to requests to
// scheme://host:port, and whether one of them is scoped to a path narrower than "/".
func (p *Policy) credentialHost(scheme, host string, port int) (has, scoped bool) {
	for _, c := range p.creds {
		if c.scheme == scheme && c.host == host && c.port == port {
			has = true
			scoped = scoped || c.path != "/"
		}
	}
	return has, scoped
}

// resolvedPath is the path a credential is matched on: escaped (a request's path as
// sent) decoded, once it is known that no upstream can resolve it to another path.
// Every form that some server reads as a different path is refused rather than
// normalised, since which reading the upstream makes is not known:
//   - dot segments ("..", ".", also with ";params"), and segments of dots and spaces
//     (" ..", "...", which Windows servers trim to dot segments);
//   - backslashes, and encoded '/', '\', '.' and '%' (double encoding among them);
//   - control characters, NUL among them, which C servers cut the path at;
//   - bytes that are not UTF-8 once decoded: overlong forms of '.', '/' and '\'
//     (%c0%ae) that lax decoders read as ASCII;
//   - non-ASCII characters other than letters, marks and digits: the fullwidth and
//     other compatibility forms of '.', '/', '\', '%' and ';' (U+FF0E, U+FF0F, U+2215,
//     U+00A5...) that Unicode normalization (NFKC) or a Windows code page turns into
//     them. No letter, mark or digit becomes '/', '\', '%', ';' or a dot segment so.
func resolvedPath(escaped string) (string, error) {
	if escaped == "" {
		return "/", nil
	}
	if escaped[0] != '/' {
		return "", errors.New("the path does not start with /")
	}
	lower := strings.ToLower(escaped)
	for _, bad := range []string{"%2f", "%5c", "%2e", "%25", "\\"} {
		if strings.Contains(lower, bad) {
			return "", fmt.Errorf("the path holds %q", bad)
		}
	}
	path, err := url.PathUnescape(escaped)
	if err != nil {
		return "", errors.New("the path is not validly percent-encoded")
	}
	if !utf8.ValidString(path) {
		return "", errors.New("the path is not UTF-8 once decoded (an overlong or broken encoding)")
	}
	for _, r := range path {
		switch {
		case r < ' ' || r == 0x7f:
			return "", fmt.Errorf("the path holds a control character (%%%02X)", r)
		case r >= utf8.RuneSelf && !unicode.IsLetter(r) && !unicode.IsMark(r) && !unicode.IsNumber(r):
			return "", fmt.Errorf("the path holds %U, a character that some servers read as ASCII punctuation", r)
		}
	}
	for seg := range strings.SplitSeq(path, "/") {
		seg, _, _ = strings.Cut(seg, ";")
		if seg == "." || seg == ".." {
			return "", errors.New("the path holds a dot segment")
		}
		if strings.Contains(seg, ".") && strings.Trim(seg, ". ") == "" {
			return "", fmt.Errorf("the path holds the segment %q, which some servers read as a dot segment", seg)
		}
	}
	return path, nil
}

// credentialFor returns the credential whose prefix matches the request, the longest
// path first; nil when none does. Only one applies per request.
func (p *Policy) credentialFor(scheme, host string, port int, path string) *credential {
	var best *credential
	for i := range p.creds {
		c := &p.creds[i]
		if c.scheme != scheme || c.host != host || c.port != port || !pathHasPrefix(path, c.path) {
			continue
		}
		if best == nil || len(c.path) > len(best.path) {
			best = c
		}
	}
	return best
}

// Intercepts says whether CONNECT to host:port is opened up to add credentials: some
// https:// credential names it.
func (p *Policy) Intercepts(host string, port int) bool {
	for _, c := range p.creds {
		if c.scheme == "https" && c.host == host && c.port == port {
			return true
		}
	}
	return false
}

// pathHasPrefix matches on whole segments: "/org" matches "/org" and "/org/x", not "/organ".
func pathHasPrefix(path, prefix string) bool {
	if prefix == "/" || path == prefix {
		return true
	}
	if !strings.HasPrefix(path, prefix) {
		return false
	}
	return strings.HasSuffix(prefix, "/") || path[len(prefix)] == '/'
}
