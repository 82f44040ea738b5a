package questions

import (
	"context"
	"errors"
	"io/fs"
	"path"
	"regexp"
	"time"

	"github.com/caddyserver/certmagic"
)

// Replies keeps a client's replies to a server's request (an MCP elicitation, from a
// 2025-11-25 session) that a balancer sent to another instance than the one whose
// request waits, in Caddy's storage: mcp_sandbox/mcp/replies/<inbox>-<request> (flat,
// as the egress questions are), until the instance that asked takes it. The entries
// are sealed by internal/mcphttp, which checks them; this only keeps them.
type Replies struct{ St certmagic.Storage }

// replyName is what an entry's name looks like (mcphttp's inbox and request number);
// only such names become storage keys.
var replyName = regexp.MustCompile(`^[0-9a-f]{16}-[0-9]{1,18}$`)

var errReplyName = errors.New("not a reply's name")

func replyKey(name string) string { return path.Join("mcp_sandbox", "mcp", "replies", name) }

// Put keeps entry under name.
func (r Replies) Put(ctx context.Context, name string, entry []byte) error {
	if !replyName.MatchString(name) {
		return errReplyName
	}
	return r.St.Store(ctx, replyKey(name), entry)
}

// Take returns the entry under name and removes it; nil when there is none, or when
// another instance removed it first.
func (r Replies) Take(ctx context.Context, name string) ([]byte, error) {
	if !replyName.MatchString(name) {
		return nil, errReplyName
	}
	b, err := r.St.Load(ctx, replyKey(name))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, err
	}
	if err := r.St.Delete(ctx, replyKey(name)); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	return b, nil
}

// Sweep removes the entries stored before t: replies whose request had ended, or sent
// twice.
func (r Replies) Sweep(ctx context.Context, t time.Time) error {
	dir := path.Join("mcp_sandbox", "mcp", "replies")
	keys, err := r.St.List(ctx, dir, false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	for _, k := range keys {
		info, err := r.St.Stat(ctx, k)
		if err != nil || info.Modified.After(t) {
			continue
		}
		if err := r.St.Delete(ctx, k); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}
