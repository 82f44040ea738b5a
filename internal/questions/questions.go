// Package questions hands egress questions and their answers between Caddy instances
// over Caddy's shared storage: a question goes to the instance whose call waits for the
// command's job, and the answer back to the one whose proxy holds the connection; a
// client's reply to an elicitation goes to the instance that asked (replies.go).
package questions

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/mcptools"
)

// Answers hands the answer to a question about a host, given by a 2026-07-28
// client's retry, to the instance whose proxy holds the connection, through Caddy's
// storage (mcp_sandbox/egress/answers/<question id>): every instance over the same
// storage reads it there.
type Answers struct{ St certmagic.Storage }

func answerKey(id string) string { return path.Join("mcp_sandbox", "egress", "answers", id) }

func (a Answers) Put(ctx context.Context, id, choice string) error {
	if a.St == nil {
		return nil
	}
	return a.St.Store(ctx, answerKey(id), []byte(choice))
}

func (a Answers) Take(ctx context.Context, id string) (string, error) {
	if a.St == nil {
		return "", nil
	}
	b, err := a.St.Load(ctx, answerKey(id))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", nil
	case err != nil:
		return "", err
	}
	if err := a.St.Delete(ctx, answerKey(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	return string(b), nil
}

// InstanceID names this Caddy process among the instances over one storage.
var InstanceID = func() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}()

// relayJob is what a job id looks like: the proxy's user names are checked as job ids
// before a question is asked, and only such names become storage keys.
var relayJob = regexp.MustCompile(`^[a-z0-9]{1,64}$`)

// Relay carries questions about hosts between instances through Caddy's storage:
// mcp_sandbox/egress/followed/<job>-<instance>-<n> while a call of an instance waits for
// the job, mcp_sandbox/egress/questions/<job>-<question id> while a question waits to be
// taken (flat, so that no directory is left per job). Two instances that follow one job may both take its question; each asks its
// call, and the first answer handed back counts.
type Relay struct {
	St   certmagic.Storage
	Self string // this instance: InstanceID
}

func relayKey(parts ...string) string {
	return path.Join(append([]string{"mcp_sandbox", "egress"}, parts...)...)
}

func (r Relay) Follow(ctx context.Context, job string) func() {
	if !relayJob.MatchString(job) {
		return func() {}
	}
	n := make([]byte, 6)
	_, _ = rand.Read(n)
	key := relayKey("followed", job+"-"+r.Self+"-"+hex.EncodeToString(n))
	if err := r.St.Store(ctx, key, nil); err != nil {
		return func() {}
	}
	return func() { _ = r.St.Delete(context.WithoutCancel(ctx), key) }
}

func (r Relay) FollowedElsewhere(ctx context.Context, job string) bool {
	if !relayJob.MatchString(job) {
		return false
	}
	keys, err := r.St.List(ctx, relayKey("followed"), false)
	if err != nil {
		return false
	}
	for _, k := range keys {
		if rest, ok := strings.CutPrefix(path.Base(k), job+"-"); ok && !strings.HasPrefix(rest, r.Self+"-") {
			return true
		}
	}
	return false
}

func (r Relay) Post(ctx context.Context, st mcptools.QuestionState) error {
	if !relayJob.MatchString(st.Job) || !relayJob.MatchString(st.ID) {
		return fmt.Errorf("job %.64q or question %.64q is not a name the relay keeps", st.Job, st.ID)
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return r.St.Store(ctx, relayKey("questions", st.Job+"-"+st.ID), b)
}

func (r Relay) Claim(ctx context.Context, job string) (mcptools.QuestionState, bool) {
	if !relayJob.MatchString(job) {
		return mcptools.QuestionState{}, false
	}
	keys, err := r.St.List(ctx, relayKey("questions"), false)
	if err != nil {
		return mcptools.QuestionState{}, false
	}
	for _, k := range keys {
		if !strings.HasPrefix(path.Base(k), job+"-") {
			continue
		}
		b, err := r.St.Load(ctx, k)
		if err != nil {
			continue
		}
		if err := r.St.Delete(ctx, k); err != nil {
			continue
		}
		var st mcptools.QuestionState
		// Another instance wrote it: a question that does not read back strictly, or
		// whose job is another, is dropped.
		if len(b) > 4096 || json.Unmarshal(b, &st) != nil || st.Job != job || !relayJob.MatchString(st.ID) ||
			time.Unix(st.Expires, 0).Before(time.Now()) {
			continue
		}
		return st, true
	}
	return mcptools.QuestionState{}, false
}

func (r Relay) Withdraw(ctx context.Context, job, id string) bool {
	if !relayJob.MatchString(job) || !relayJob.MatchString(id) {
		return false
	}
	key := relayKey("questions", job+"-"+id)
	if !r.St.Exists(ctx, key) {
		return false
	}
	return r.St.Delete(ctx, key) == nil
}
