package mcptools

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// Relay carries a question about a host between instances over one storage. The
// instance whose proxy took a command's connection (every instance's agent listens on
// the sandbox's proxy port) may have no call waiting for the command's job, while
// another instance has one: the question goes there, and its answer comes back
// through Answers.
type Relay interface {
	// Follow notes, until the returned func is called, that a call of this instance
	// waits for job.
	Follow(ctx context.Context, job string) (unfollow func())
	// FollowedElsewhere reports whether a call of another instance waits for job.
	FollowedElsewhere(ctx context.Context, job string) bool
	// Post publishes st for the instance that follows its job.
	Post(ctx context.Context, st QuestionState) error
	// Claim takes a question posted for job; ok is false when there is none.
	Claim(ctx context.Context, job string) (st QuestionState, ok bool)
	// Withdraw removes question id of job unless it was claimed, and reports whether
	// it was still there.
	Withdraw(ctx context.Context, job, id string) bool
}

// relayPoll is how often a call looks for questions other instances posted about its
// job.
const relayPoll = 300 * time.Millisecond

// claimWithin is how long a posted question waits to be taken before the instance that
// posted it gives up (the other instance's call ended, or it was killed).
const claimWithin = 3 * time.Second

// relayCannot is the answer an instance hands back when it could not ask after all.
const relayCannot = "cannot"

// followRelayed puts to the call rc, while it waits for job, the questions other
// instances post about job. The call is noted in storage before its command starts: a
// connection another instance's proxy takes at once finds it there, and posts its
// question instead of refusing it unasked.
func (s *Tools) followRelayed(rc *runningCall, job string) {
	unfollow := s.opts.Relay.Follow(rc.ctx, job)
	go s.claimRelayed(rc, job, unfollow)
}

// claimRelayed takes the questions posted about job while the call rc waits for it.
func (s *Tools) claimRelayed(rc *runningCall, job string, unfollow func()) {
	defer unfollow()
	t := time.NewTicker(relayPoll)
	defer t.Stop()
	for {
		select {
		case <-rc.ctx.Done():
			return
		case <-t.C:
		}
		if st, ok := s.opts.Relay.Claim(rc.ctx, job); ok {
			go s.answerRelayed(st)
		}
	}
}

// answerRelayed asks a question another instance posted, on this instance's call for
// its job, and hands the answer back.
func (s *Tools) answerRelayed(st QuestionState) {
	ctx, cancel := context.WithDeadline(context.Background(), time.Unix(st.Expires, 0))
	defer cancel()
	choice := relayCannot
	if rc := s.calls.get(st.Job); rc != nil && rc.person == st.Person {
		if a, err := s.askCall(ctx, rc, st.Person, st.Job, st.Host, st.Port); err == nil {
			choice = a
		}
	}
	if err := s.opts.Answers.Put(context.WithoutCancel(ctx), st.ID, choice); err != nil {
		s.opts.Logger.Warn("handing an egress answer back to the instance that asked", zap.Error(err))
	}
}

// askElsewhere posts a question about job, which no call of this instance waits for,
// for the instance whose call does, and waits for its answer.
func (s *Tools) askElsewhere(ctx context.Context, person, job, host string, port int) (string, error) {
	r := s.opts.Relay
	if r == nil || s.opts.Answers == nil || !r.FollowedElsewhere(ctx, job) {
		return "", fmt.Errorf("no call runs job %s: %w", job, ErrCannotAsk)
	}
	id := make([]byte, 12)
	_, _ = rand.Read(id)
	ttl := s.opts.AskTimeout
	if ttl <= 0 {
		ttl = time.Minute
	}
	st := QuestionState{ID: hex.EncodeToString(id), Person: person, Job: job, Host: host, Port: port,
		Expires: time.Now().Add(ttl).Unix()}
	if err := r.Post(ctx, st); err != nil {
		return "", fmt.Errorf("posting the question for the instance that runs job %s: %v: %w", job, err, ErrCannotAsk)
	}
	posted := time.Now()
	t := time.NewTicker(answersPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			r.Withdraw(context.WithoutCancel(ctx), job, st.ID)
			return "", ctx.Err()
		case <-t.C:
		}
		a, err := s.opts.Answers.Take(ctx, st.ID)
		switch {
		case err != nil:
			s.opts.Logger.Warn("reading an egress answer from another instance", zap.Error(err))
		case a == relayCannot:
			return "", fmt.Errorf("the instance that runs job %s could not ask: %w", job, ErrCannotAsk)
		case a != "":
			return a, nil
		}
		if time.Since(posted) > claimWithin && r.Withdraw(ctx, job, st.ID) {
			return "", fmt.Errorf("no instance took the question about job %s: %w", job, ErrCannotAsk)
		}
	}
}
