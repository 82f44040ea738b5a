package egress

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Answer is what the person said to a question about a host.
type Answer int

// The answers a person can give.
const (
	Deny Answer = iota
	AllowOnce
	AllowAlways
)

// Question is a host that a command's connection asks for, put to the person whose call
// ran the command.
type Question struct {
	Job  string // the job id, which the proxy user name carries
	Host string // normalized
	Port int
}

// Asker puts a [Question] to the person. It returns when they answered, when ctx ends,
// or at once with an error wrapping [ErrCannotAsk] when nobody can be asked (the call
// that ran the command returned, or its client does not answer questions).
type Asker interface {
	Ask(ctx context.Context, q Question) (Answer, error)
}

// ErrCannotAsk is wrapped by an [Asker]'s errors when nobody can be asked.
var ErrCannotAsk = errors.New("nobody can be asked")

// Approvals are the hosts people allowed always, kept across restarts. Approved is
// asked per connection, so a revocation applies to the next one.
type Approvals interface {
	Approved(person, host string, port int) bool
	Approve(ctx context.Context, person, host string, port int) error
}

// Bounds of asking: a command that opens connections to many new hosts must not flood
// the person with questions, nor hold many connections waiting.
const (
	// AskTimeout is how long a connection waits for the person's answer.
	AskTimeout = time.Minute
	// MaxAskedPerJob is how many hosts one command may ask about; later ones are refused.
	MaxAskedPerJob = 3
	// MaxAsking is how many questions one sandbox may have open at once.
	MaxAsking = 4
	// AllowOnceFor bounds an "allow once": it lasts while the job that asked runs
	// ([Gateway.JobEnded]), and never longer than this, for a job whose end is not
	// seen.
	AllowOnceFor = time.Hour
)

// Reasons of refusals made by asking.
const (
	ReasonDeclined     = "refused by the person"
	ReasonNoAnswer     = "not answered in time"
	ReasonCannotAsk    = "not allowed by the operator, and nobody could be asked"
	ReasonAskedTooMuch = "the command asked about too many new hosts"
	ReasonAskingBusy   = "too many questions open at once"
)

// asking is a Gateway's state of questions: the ones open, per host and port, and
// what was allowed once, per job.
type asking struct {
	mu    sync.Mutex
	open  map[string]*question   // by host:port
	once  map[string][]onceGrant // what was allowed once, by job
	jobs  []string               // ids in once and asked, oldest first
	asked map[string]int         // hosts asked about, by job
}

// onceGrant is a host:port allowed once, and when.
type onceGrant struct {
	key string
	at  time.Time
}

type question struct {
	done   chan struct{}
	answer Answer
	err    error
}

const maxAskJobs = 1000

func (a *asking) init() {
	if a.open == nil {
		a.open, a.once, a.asked = map[string]*question{}, map[string][]onceGrant{}, map[string]int{}
	}
}

// remember makes room for job in the per-job maps, dropping the oldest job's entries.
func (a *asking) remember(job string) {
	if _, ok := a.asked[job]; ok {
		return
	}
	if len(a.jobs) >= maxAskJobs {
		delete(a.once, a.jobs[0])
		delete(a.asked, a.jobs[0])
		a.jobs = a.jobs[1:]
	}
	a.jobs = append(a.jobs, job)
	a.asked[job] = 0
}

// forgetIdle drops job from the per-job maps when nothing of it is kept: no host
// asked about, none allowed once.
func (a *asking) forgetIdle(job string) {
	if a.asked[job] > 0 || len(a.once[job]) > 0 {
		return
	}
	a.forget(job)
}

// forget drops job from the per-job maps.
func (a *asking) forget(job string) {
	delete(a.asked, job)
	delete(a.once, job)
	for i, j := range a.jobs {
		if j == job {
			a.jobs = append(a.jobs[:i], a.jobs[i+1:]...)
			break
		}
	}
}

// ask decides a connection the policy refused as not allowed: allowed when the person
// approved the host always, or once for this job, or answers so now; a refusal
// otherwise. One question per host and port is open at a time: later connections wait
// for its answer.
func (g *Gateway) ask(ctx context.Context, user string, r *Refusal) *Refusal {
	set := g.asker.Load()
	if set == nil || r.Reason != ReasonNotAllowed {
		return r
	}
	if pol := g.policy.Load(); pol == nil || !pol.Askable(r.Host) {
		return r
	}
	person := g.personName()
	if set.approvals != nil && set.approvals.Approved(person, r.Host, r.Port) {
		return nil
	}
	if !g.sb.JobID(user) {
		return &Refusal{Host: r.Host, Port: r.Port, Reason: ReasonCannotAsk}
	}
	key := net.JoinHostPort(r.Host, strconv.Itoa(r.Port))
	a := &g.asking
	for {
		a.mu.Lock()
		a.init()
		for _, o := range a.once[user] {
			if o.key == key && g.opts.Now().Sub(o.at) < AllowOnceFor {
				a.mu.Unlock()
				return nil
			}
		}
		if q := a.open[key]; q != nil {
			a.mu.Unlock()
			select {
			case <-q.done:
			case <-ctx.Done():
				return &Refusal{Host: r.Host, Port: r.Port, Reason: ReasonNoAnswer}
			}
			if q.err == nil && q.answer == Deny {
				return &Refusal{Host: r.Host, Port: r.Port, Reason: ReasonDeclined}
			}
			if set.approvals != nil && set.approvals.Approved(person, r.Host, r.Port) {
				return nil
			}
			continue // allowed once for another job, or unanswered: ask for this one
		}
		a.remember(user)
		if a.asked[user] >= MaxAskedPerJob {
			a.mu.Unlock()
			return &Refusal{Host: r.Host, Port: r.Port, Reason: ReasonAskedTooMuch}
		}
		if len(a.open) >= MaxAsking {
			a.mu.Unlock()
			return &Refusal{Host: r.Host, Port: r.Port, Reason: ReasonAskingBusy}
		}
		a.asked[user]++
		q := &question{done: make(chan struct{})}
		a.open[key] = q
		a.mu.Unlock()

		actx, cancel := context.WithTimeout(ctx, AskTimeout)
		q.answer, q.err = set.asker.Ask(actx, Question{Job: user, Host: r.Host, Port: r.Port})
		cancel()
		if q.err == nil && q.answer == AllowAlways && set.approvals != nil {
			if err := set.approvals.Approve(ctx, person, r.Host, r.Port); err != nil {
				g.logger.Warn("keeping an egress approval", zap.Error(err), zap.String("host", r.Host))
			}
		}
		a.mu.Lock()
		delete(a.open, key)
		if errors.Is(q.err, ErrCannotAsk) {
			// Nobody was asked: it does not count. A job id the sandbox made up is never
			// asked about, so it must not take the place of a real job's count either.
			a.asked[user]--
			a.forgetIdle(user)
		}
		if q.err == nil && q.answer == AllowOnce {
			a.remember(user)
			grants := slices.DeleteFunc(a.once[user], func(o onceGrant) bool { return o.key == key })
			if len(grants) < maxBlockedPerJob {
				a.once[user] = append(grants, onceGrant{key: key, at: g.opts.Now()})
			}
		}
		a.mu.Unlock()
		close(q.done)
		switch {
		case errors.Is(q.err, ErrCannotAsk):
			return &Refusal{Host: r.Host, Port: r.Port, Reason: ReasonCannotAsk}
		case q.err != nil:
			g.logger.Info("egress question not answered", zap.String("host", r.Host), zap.Int("port", r.Port),
				zap.String("person", person), zap.String("job", user), zap.Error(q.err))
			return &Refusal{Host: r.Host, Port: r.Port, Reason: ReasonNoAnswer}
		case q.answer == Deny:
			return &Refusal{Host: r.Host, Port: r.Port, Reason: ReasonDeclined}
		}
		return nil
	}
}

// JobEnded forgets what was allowed once for job, whose command ended: a later
// connection that carries its id (the sandbox chooses proxy user names, and may
// reuse an old one) is asked about again, and refused when no call runs the job.
func (g *Gateway) JobEnded(job string) {
	a := &g.asking
	a.mu.Lock()
	defer a.mu.Unlock()
	a.init()
	if _, ok := a.asked[job]; ok {
		a.forget(job)
	}
}

// askSettings are what a configuration says of asking.
type askSettings struct {
	asker     Asker
	approvals Approvals
}
