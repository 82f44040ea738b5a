package mcptools

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"go.uber.org/zap"
)

// Protocol 2026-07-28 has no server-initiated requests: a question about a host ends
// the call that waits for the command with resultType "input_required" (one
// elicitation/create, the same form as elicitation), and the client retries the call
// with the answer and the requestState, a signed QuestionState. The retry applies the
// answer and follows the job, as job_output does. The held connection waits for the
// answer meanwhile (up to the ask timeout), on the instance that holds it: a retry on
// another instance hands the answer over through Answers.

// questionKey is the key of the one input request of an input_required result.
const questionKey = "egress"

// QuestionState is what a requestState carries: the question a call returned with,
// bound to the person, the job, the host and port, and an expiry.
type QuestionState struct {
	V       int    `json:"v"`
	ID      string `json:"q"` // the question's id
	Person  string `json:"p"`
	Job     string `json:"j"`
	Host    string `json:"h"`
	Port    int    `json:"o"`
	Expires int64  `json:"e"` // Unix seconds
}

// Errors of OpenState.
var (
	ErrStateMalformed = errors.New("the requestState is not one this server made")
	ErrStateTampered  = errors.New("the requestState's signature does not match")
	ErrStateExpired   = errors.New("the requestState has expired")
	ErrStatePerson    = errors.New("the requestState was made for another person")
)

// maxStateLen bounds a requestState read.
const maxStateLen = 2048

// SealState signs st with key: base64url(JSON) "." base64url(HMAC-SHA256).
func SealState(key []byte, st QuestionState) string {
	st.V = 1
	b, _ := json.Marshal(st)
	body := base64.RawURLEncoding.EncodeToString(b)
	m := hmac.New(sha256.New, key)
	m.Write([]byte(body))
	return body + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// OpenState checks a requestState made by SealState with key, for person at now.
// The state is returned also when it is expired or another person's (with the
// error), never when malformed or tampered.
func OpenState(key []byte, s, person string, now time.Time) (QuestionState, error) {
	var st QuestionState
	body, sig, ok := strings.Cut(s, ".")
	if !ok || len(s) > maxStateLen {
		return st, ErrStateMalformed
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return st, ErrStateMalformed
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(body))
	if !hmac.Equal(got, m.Sum(nil)) {
		return st, ErrStateTampered
	}
	b, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil || json.Unmarshal(b, &st) != nil || st.V != 1 || st.ID == "" || st.Job == "" || st.Host == "" || st.Port <= 0 {
		return QuestionState{}, ErrStateMalformed
	}
	if st.Person != person {
		return st, ErrStatePerson
	}
	if now.Unix() >= st.Expires {
		return st, ErrStateExpired
	}
	return st, nil
}

// peekStateID is the question id a requestState names, unverified; "" if none.
func peekStateID(s string) string {
	body, _, _ := strings.Cut(s, ".")
	b, err := base64.RawURLEncoding.DecodeString(body)
	var st QuestionState
	if err != nil || len(s) > maxStateLen || json.Unmarshal(b, &st) != nil {
		return ""
	}
	return st.ID
}

// Answers hands a question's answer from the instance the retry reached to the one
// whose proxy holds the connection (Caddy's shared storage).
type Answers interface {
	Put(ctx context.Context, id, choice string) error
	// Take returns the answer to question id and forgets it; "" while there is none.
	Take(ctx context.Context, id string) (string, error)
}

// answersPoll is how often a held question looks for an answer given elsewhere.
const answersPoll = 500 * time.Millisecond

// pendingQuestion is a question a 2026-07-28 call returned with, whose connection
// this instance holds.
type pendingQuestion struct {
	st     QuestionState
	params mcp.ElicitationParams
	answer chan string // buffered 1
}

// pending are the questions open by MRTR, by id.
type pending struct {
	mu sync.Mutex
	m  map[string]*pendingQuestion
}

func (p *pending) add(q *pendingQuestion) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]*pendingQuestion{}
	}
	p.m[q.st.ID] = q
}

func (p *pending) remove(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.m, id)
}

// answer gives question id its answer when it is open here for person; it reports
// whether it was.
func (p *pending) answer(id, person, choice string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.m[id]
	if q == nil || q.st.Person != person {
		return false
	}
	select {
	case q.answer <- choice:
	default:
	}
	return true
}

// yielder lets a question end a 2026-07-28 call that waits for a job: the call then
// returns input_required with it.
type yielder struct {
	mu   sync.Mutex
	q    *pendingQuestion
	fire chan struct{}
}

func newYielder() *yielder { return &yielder{fire: make(chan struct{})} }

// offer gives the call its question; false when it has one already.
func (y *yielder) offer(q *pendingQuestion) bool {
	y.mu.Lock()
	defer y.mu.Unlock()
	if y.q != nil {
		return false
	}
	y.q = q
	close(y.fire)
	return true
}

// question is the question offered, nil if none.
func (y *yielder) question() *pendingQuestion {
	if y == nil {
		return nil
	}
	y.mu.Lock()
	defer y.mu.Unlock()
	return y.q
}

// yielderFor is the yielder of a call that can return input_required: a 2026-07-28
// call, not an MCP task, on a server that signs states; nil otherwise.
func (s *Tools) yielderFor(ctx context.Context, c call) *yielder {
	if c.task || len(s.opts.QuestionKey) == 0 || !mcp.IsModernProtocol(server.RequestProtocolVersion(ctx)) {
		return nil
	}
	return newYielder()
}

// askByMRTR is AskHost for a 2026-07-28 call: the call returns with the question, and
// the answer comes with its retry (here, or through Answers from another instance).
func (s *Tools) askByMRTR(ctx context.Context, rc *runningCall, person, job, host string, port int) (string, error) {
	id := make([]byte, 12)
	_, _ = rand.Read(id)
	ttl := s.opts.AskTimeout
	if ttl <= 0 {
		ttl = time.Minute
	}
	q := &pendingQuestion{
		st: QuestionState{ID: hex.EncodeToString(id), Person: person, Job: job, Host: host, Port: port,
			Expires: time.Now().Add(ttl).Unix()},
		params: questionParams(rc.command, host, port),
		answer: make(chan string, 1),
	}
	s.pending.add(q)
	defer s.pending.remove(q.st.ID)
	if !rc.yield.offer(q) {
		return "", fmt.Errorf("the call waiting for job %s already carries a question: %w", job, ErrCannotAsk)
	}
	var tick <-chan time.Time
	if s.opts.Answers != nil {
		t := time.NewTicker(answersPoll)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case a := <-q.answer:
			if a == "" {
				return "", fmt.Errorf("the call returned before the question was put: %w", ErrCannotAsk)
			}
			return a, nil
		case <-ctx.Done():
			return "", ctx.Err()
		case <-tick:
			a, err := s.opts.Answers.Take(ctx, q.st.ID)
			if err != nil {
				s.opts.Logger.Warn("reading an egress answer", zap.Error(err))
			}
			if a != "" {
				return a, nil
			}
		}
	}
}

// inputRequired is the result of a call that a question ended.
func (s *Tools) inputRequired(q *pendingQuestion) *mcp.CallToolResult {
	return server.NewInputRequestBuilder(SealState(s.opts.QuestionKey, q.st)).Elicit(questionKey, q.params).ToolResult()
}

// dropQuestion answers the question of a call that returned its result instead
// (the job ended as the question came): nobody could be asked.
func (s *Tools) dropQuestion(y *yielder) {
	if q := y.question(); q != nil {
		s.pending.answer(q.st.ID, q.st.Person, "")
	}
}

// waiter is an argument set with a wait (execute's, job_output's, job_input's).
type waiter interface{ waitOf() *float64 }

func (w waitArg) waitOf() *float64 { return w.Wait }

// retryText says what to do when a retry's state cannot be used.
const retryText = " The connection that waited for the answer was refused. Run the command again (execute) and answer the new question when it comes."

// resume is a retry of a call that returned input_required: it applies the answer and
// follows the job, as job_output does. in is the retried call's arguments.
func (s *Tools) resume(ctx context.Context, box Box, c call, req mcp.CallToolRequest, in any) *mcp.CallToolResult {
	person := CallerFrom(ctx).Person
	if len(s.opts.QuestionKey) == 0 {
		return mcp.NewToolResultError("This server asked no question (it keeps none): leave requestState and inputResponses out and call again.")
	}
	st, err := OpenState(s.opts.QuestionKey, req.Params.RequestState, person, time.Now())
	if err == nil {
		if ref, ok := in.(interface{ jobID() string }); ok && ref.jobID() != st.Job {
			err = fmt.Errorf("%w: it names job %s, not %s", ErrStateMalformed, st.Job, ref.jobID())
		}
	}
	if err != nil {
		switch {
		case st.ID != "" && st.Person == person: // expired, or the wrong job: refuse the question it names
			s.deliver(ctx, st, ChoiceDeny)
		case errors.Is(err, ErrStateTampered):
			// Unverified: only a question open here for this very person is refused.
			if id := peekStateID(req.Params.RequestState); id != "" {
				s.pending.answer(id, person, ChoiceDeny)
			}
		}
		s.opts.Logger.Info("egress answer refused", zap.String("person", person), zap.String("tool", c.tool), zap.Error(err))
		return mcp.NewToolResultError("The answer to the question about a host was not used: " + err.Error() + "." + retryText)
	}
	choice := ChoiceDeny
	if res := server.ElicitationResponse(req.Params.InputResponses, questionKey); res != nil && res.Action == mcp.ElicitationResponseActionAccept {
		content, _ := res.Content.(map[string]any)
		switch d, _ := content["decision"].(string); d {
		case ChoiceOnce, ChoiceAlways:
			choice = d
		}
	}
	s.deliver(ctx, st, choice)
	wait := s.pollWait()
	if w, ok := in.(waiter); ok && w.waitOf() != nil {
		wait = time.Duration(*w.waitOf() * float64(time.Second))
	}
	res, _ := s.follow(ctx, box, c, st.Job, wait, nil)
	return res
}

// deliver gives question st its answer ("" refuses it as unanswered): at once when
// this instance holds its connection, else through Answers.
func (s *Tools) deliver(ctx context.Context, st QuestionState, choice string) {
	if s.pending.answer(st.ID, st.Person, choice) || s.opts.Answers == nil {
		return
	}
	if choice == "" {
		choice = ChoiceDeny
	}
	if err := s.opts.Answers.Put(ctx, st.ID, choice); err != nil {
		s.opts.Logger.Warn("handing an egress answer over", zap.Error(err))
	}
}
