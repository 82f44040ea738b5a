package mcptools

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
)

// memRelay is a Relay and Answers in memory, as one storage shared by instances.
type memRelay struct {
	mu        *sync.Mutex       // shared by the instances
	followed  map[string]string // job -> instance
	questions map[string]QuestionState
	answers   map[string]string
	self      string
}

func (m *memRelay) as(self string) *memRelay {
	return &memRelay{mu: m.mu, followed: m.followed, questions: m.questions, answers: m.answers, self: self}
}

func (m *memRelay) Follow(_ context.Context, job string) func() {
	m.mu.Lock()
	m.followed[job] = m.self
	m.mu.Unlock()
	return func() {}
}
func (m *memRelay) FollowedElsewhere(_ context.Context, job string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	who, ok := m.followed[job]
	return ok && who != m.self
}
func (m *memRelay) Post(_ context.Context, st QuestionState) error {
	m.mu.Lock()
	m.questions[st.ID] = st
	m.mu.Unlock()
	return nil
}
func (m *memRelay) Claim(context.Context, string) (QuestionState, bool) {
	return QuestionState{}, false
}
func (m *memRelay) Withdraw(_ context.Context, _, id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.questions[id]
	delete(m.questions, id)
	return ok
}
func (m *memRelay) Put(_ context.Context, id, choice string) error {
	m.mu.Lock()
	m.answers[id] = choice
	m.mu.Unlock()
	return nil
}
func (m *memRelay) Take(_ context.Context, id string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.answers[id]
	delete(m.answers, id)
	return a, nil
}

// TestAskElsewhere: a question about a job no call here waits for is refused at once
// when no other instance follows the job either; posted when one does, and answered
// with what comes back; refused when nobody takes it within claimWithin, and then no
// longer posted.
func TestAskElsewhere(t *testing.T) {
	shared := &memRelay{mu: &sync.Mutex{}, followed: map[string]string{}, questions: map[string]QuestionState{}, answers: map[string]string{}}
	b := shared.as("b")
	tools := &Tools{opts: Options{Relay: b, Answers: b, Logger: zap.NewNop(), AskTimeout: time.Minute}}
	ctx := context.Background()

	begin := time.Now()
	if _, err := tools.AskHost(ctx, "alice", "j1", "x.test", 443); !errors.Is(err, ErrCannotAsk) || time.Since(begin) > time.Second {
		t.Fatalf("nobody follows j1: %v after %v, want ErrCannotAsk at once", err, time.Since(begin))
	}

	shared.as("a").Follow(ctx, "j1")
	go func() { // instance A: takes the question and answers it
		for {
			shared.mu.Lock()
			for id, st := range shared.questions {
				if st.Job == "j1" && st.Host == "x.test" && st.Person == "alice" {
					delete(shared.questions, id)
					shared.answers[id] = ChoiceOnce
					shared.mu.Unlock()
					return
				}
			}
			shared.mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	if a, err := tools.AskHost(ctx, "alice", "j1", "x.test", 443); a != ChoiceOnce || err != nil {
		t.Fatalf("answered on A: %q %v", a, err)
	}

	begin = time.Now()
	_, err := tools.AskHost(ctx, "alice", "j1", "y.test", 443)
	if !errors.Is(err, ErrCannotAsk) || !strings.Contains(err.Error(), "no instance took") {
		t.Fatalf("nobody takes it: %v", err)
	}
	if d := time.Since(begin); d < claimWithin || d > claimWithin+2*time.Second {
		t.Errorf("given up after %v, want about %v", d, claimWithin)
	}
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if len(shared.questions) != 0 {
		t.Errorf("the question nobody took is still posted: %v", shared.questions)
	}
}
