package links

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/expiry"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/secret"
)

// Where the links live.
const (
	FilesPrefix   = "/files/"
	UploadsPrefix = "/uploads/"
)

// Link is a signed link: the path to put after the origin, the id the console knows
// it by, and when it expires.
type Link struct {
	Path    string
	ID      string
	Expires time.Time
}

// A link's kind keys its signature and its id: a download link's signature never
// opens an upload page, nor the reverse.
type kind struct {
	prefix string // FilesPrefix or UploadsPrefix
	label  string // the key derivation label
	idTag  string // what the id hashes the signature with
}

var (
	downloadKind = kind{FilesPrefix, "download links v1", "download"}
	uploadKind   = kind{UploadsPrefix, "upload links v1", "upload"}
)

// Signer makes and checks the two kinds of links:
//
//	/files/<expiry unix seconds>.<signature>[.<owner>]/<file path, escaped segment by segment>
//	/uploads/<expiry unix seconds>.<signature>[.<owner>]/<directory, escaped segment by segment>/
//
// The signature is an HMAC-SHA256 over the expiry, the owner and the path, with a key
// derived from the API key under the kind's own label, so rotating the key invalidates
// every link. The owner is the person whose sandbox the link reaches (none for the
// operator's): a link opens only its owner's sandbox, and changing the owner breaks the
// signature. A link is a capability: whoever holds it may download that file, or add
// files to that one directory, until it expires.
type Signer struct {
	keys  map[kind][]byte
	owner string // the person links are made for; "" for the operator
}

// As returns a signer that makes links to person's sandbox ("" for the operator's).
func (s *Signer) As(person string) *Signer {
	return &Signer{keys: s.keys, owner: person}
}

// NewSigner derives the link keys from the API key.
func NewSigner(apiKey string) *Signer {
	return &Signer{keys: map[kind][]byte{
		downloadKind: secret.DeriveKey(apiKey, downloadKind.label),
		uploadKind:   secret.DeriveKey(apiKey, uploadKind.label),
	}}
}

// mac signs a link of owner. The operator's links sign what they always did; an
// owner's name comes first, marked by '@', where a path (always starting with '/')
// never could.
func (s *Signer) mac(k kind, exp int64, owner, p string) string {
	m := hmac.New(sha256.New, s.keys[k])
	if owner == "" {
		fmt.Fprintf(m, "%d\n%s", exp, p)
	} else {
		fmt.Fprintf(m, "%d\n@%s\n%s", exp, owner, p)
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// sign makes the link of kind k to the clean absolute path p, valid until exp.
func (s *Signer) sign(k kind, p string, exp time.Time) Link {
	exp = exp.Truncate(time.Second)
	sig := s.mac(k, exp.Unix(), s.owner, p)
	var b strings.Builder
	fmt.Fprintf(&b, "%s%d.%s", k.prefix, exp.Unix(), sig)
	if s.owner != "" {
		b.WriteString("." + s.owner)
	}
	b.WriteString("/")
	b.WriteString(escapePath(p))
	return Link{Path: b.String(), ID: linkID(k, sig), Expires: exp}
}

// Download signs a link to the file or directory p that lives for ttl from now. p must
// be clean (see CleanPath): browsers and curl remove dot segments before they ask, so a
// link to /sandbox/./a.txt could never be fetched.
func (s *Signer) Download(p string, now time.Time, ttl time.Duration) Link {
	return s.sign(downloadKind, p, now.Add(ttl))
}

// Upload signs an upload link to the directory dir (absolute, clean), valid until exp.
func (s *Signer) Upload(dir string, exp time.Time) Link {
	l := s.sign(uploadKind, dir, exp)
	if !strings.HasSuffix(l.Path, "/") {
		l.Path += "/"
	}
	return l
}

// escapePath escapes each segment of an absolute path, without its leading slash.
func escapePath(p string) string {
	segs := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i, s := range segs {
		segs[i] = escapeSegment(s)
	}
	return strings.Join(segs, "/")
}

// escapeSegment escapes a path segment so that it survives every client's URL
// handling: url.PathEscape leaves characters such as ':' that some clients rewrite.
func escapeSegment(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// linkID names a link by its signature: the same id for the link made and the link
// used, and never another kind's id.
func linkID(k kind, sig string) string {
	sum := sha256.Sum256([]byte(k.idTag + "\x00" + sig))
	return hex.EncodeToString(sum[:12])
}

var (
	errLinkInvalid = errors.New("link invalid")
	errLinkExpired = errors.New("link expired")
)

// token splits the path after a kind's prefix into its expiry, its signature, its
// owner and the rest.
func token(k kind, urlPath string) (exp int64, sig, owner, rest string, ok bool) {
	tok, rest, ok := strings.Cut(strings.TrimPrefix(urlPath, k.prefix), "/")
	if !ok {
		return 0, "", "", "", false
	}
	expStr, sig, ok := strings.Cut(tok, ".")
	sig, owner, named := strings.Cut(sig, ".")
	exp, good := expiry.Parse(expStr)
	return exp, sig, owner, rest, ok && good && (!named || owner != "")
}

// valid checks sig against the owner and path p of kind k.
func (s *Signer) valid(k kind, exp int64, sig, owner, p string) bool {
	return hmac.Equal([]byte(sig), []byte(s.mac(k, exp, owner, p)))
}

// verifyDownload checks a request path below /files/ and returns the link with its
// owner and the container path it names.
func (s *Signer) verifyDownload(urlPath string, now time.Time) (owner, p string, l Link, err error) {
	exp, sig, owner, p, ok := token(downloadKind, urlPath)
	if !ok || p == "" {
		return "", "", Link{}, errLinkInvalid
	}
	p = "/" + p
	if !s.valid(downloadKind, exp, sig, owner, p) {
		return "", "", Link{}, errLinkInvalid
	}
	l = Link{Path: urlPath, ID: linkID(downloadKind, sig), Expires: time.Unix(exp, 0)}
	if now.After(l.Expires) {
		return owner, p, l, errLinkExpired
	}
	return owner, p, l, nil
}

// DownloadID is the id of the download link whose path is urlPath, as Download gave it.
func DownloadID(urlPath string) string {
	_, sig, _, _, _ := token(downloadKind, urlPath)
	return linkID(downloadKind, sig)
}

// uploadTarget is what a request below /uploads/ asks for.
type uploadTarget struct {
	id     string    // names the link in the console, from its signature
	owner  string    // whose sandbox; "" for the operator's
	dir    string    // the signed directory
	name   string    // the raw file name after the directory ("" for the page)
	expiry time.Time // when the link expires
}

// verifyUpload checks a request path below /uploads/. The last segment is the file name
// (empty for the page itself); the ones before it are the directory. When that reading
// fails and the path does not end in '/', it also tries the whole path as the
// directory, so that redirect can fix a link pasted without its final slash.
func (s *Signer) verifyUpload(escapedPath string, now time.Time) (t uploadTarget, slashless bool, err error) {
	exp, sig, owner, p, ok := token(uploadKind, escapedPath)
	if !ok {
		return t, false, errLinkInvalid
	}
	segs := strings.Split(p, "/")
	for i, seg := range segs {
		var perr error
		if segs[i], perr = url.PathUnescape(seg); perr != nil {
			return t, false, errLinkInvalid
		}
	}
	check := func(dirSegs []string) (string, bool) {
		dir := path.Clean("/" + strings.Join(dirSegs, "/"))
		return dir, s.valid(uploadKind, exp, sig, owner, dir)
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
	t = uploadTarget{id: linkID(uploadKind, sig), owner: owner, dir: dir, name: name, expiry: time.Unix(exp, 0)}
	if now.After(t.expiry) {
		return t, slashless, errLinkExpired
	}
	return t, slashless, nil
}
