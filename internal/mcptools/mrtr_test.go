package mcptools

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestQuestionState(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	now := time.Unix(1_800_000_000, 0)
	st := QuestionState{ID: "q1", Person: "alice", Job: "j0123456789ab", Host: "pypi.test", Port: 443, Expires: now.Add(time.Minute).Unix()}
	sealed := SealState(key, st)

	got, err := OpenState(key, sealed, "alice", now)
	if err != nil || got.ID != "q1" || got.Job != st.Job || got.Host != "pypi.test" || got.Port != 443 {
		t.Fatalf("OpenState = %+v, %v; want the state back", got, err)
	}
	// Another person's state, or one past its expiry, is refused.
	if _, err := OpenState(key, sealed, "bob", now); !errors.Is(err, ErrStatePerson) {
		t.Errorf("for bob: %v, want ErrStatePerson", err)
	}
	if _, err := OpenState(key, sealed, "", now); !errors.Is(err, ErrStatePerson) {
		t.Errorf("for the operator: %v, want ErrStatePerson", err)
	}
	if _, err := OpenState(key, sealed, "alice", now.Add(time.Minute)); !errors.Is(err, ErrStateExpired) {
		t.Errorf("after a minute: %v, want ErrStateExpired", err)
	}
	// Another key (another site, or another purpose) does not verify it.
	if _, err := OpenState([]byte("another key of thirty-two bytes!"), sealed, "alice", now); !errors.Is(err, ErrStateTampered) {
		t.Errorf("other key: %v, want ErrStateTampered", err)
	}
	// Each change of the body or the signature is refused.
	body, sig, _ := strings.Cut(sealed, ".")
	for _, other := range []QuestionState{
		{ID: "q1", Person: "alice", Job: st.Job, Host: "evil.test", Port: 443, Expires: st.Expires},
		{ID: "q1", Person: "alice", Job: st.Job, Host: "pypi.test", Port: 8443, Expires: st.Expires},
		{ID: "q1", Person: "alice", Job: "j999999999999", Host: "pypi.test", Port: 443, Expires: st.Expires},
		{ID: "q1", Person: "alice", Job: st.Job, Host: "pypi.test", Port: 443, Expires: st.Expires + 3600},
		{ID: "q1", Person: "bob", Job: st.Job, Host: "pypi.test", Port: 443, Expires: st.Expires},
	} {
		forged, _, _ := strings.Cut(SealState(key, other), ".")
		if _, err := OpenState(key, forged+"."+sig, other.Person, now); !errors.Is(err, ErrStateTampered) {
			t.Errorf("body of %+v with the old signature: %v, want ErrStateTampered", other, err)
		}
	}
	flipped := []byte(sig)
	flipped[3] ^= 1
	for name, s := range map[string]string{
		"signature": body + "." + string(flipped),
		"body":      "x" + sealed,
	} {
		if _, err := OpenState(key, s, "alice", now); !errors.Is(err, ErrStateTampered) && !errors.Is(err, ErrStateMalformed) {
			t.Errorf("changed %s: %v, want a refusal", name, err)
		}
	}
	for _, s := range []string{"", "abc", ".", body, "a.b.c", strings.Repeat("a", 3000) + "." + sig} {
		if _, err := OpenState(key, s, "alice", now); !errors.Is(err, ErrStateMalformed) && !errors.Is(err, ErrStateTampered) {
			t.Errorf("OpenState(%.20q) = %v, want a refusal", s, err)
		}
	}
	// A well-signed state that lacks what a retry needs is malformed.
	if _, err := OpenState(key, SealState(key, QuestionState{Person: "alice", Expires: st.Expires}), "alice", now); !errors.Is(err, ErrStateMalformed) {
		t.Errorf("empty state: %v, want ErrStateMalformed", err)
	}
	if id := peekStateID(sealed); id != "q1" {
		t.Errorf("peekStateID = %q, want q1", id)
	}
}

func TestPendingAnswerOnlyForItsPerson(t *testing.T) {
	var p pending
	q := &pendingQuestion{st: QuestionState{ID: "q1", Person: "alice"}, answer: make(chan string, 1)}
	p.add(q)
	if p.answer("q1", "bob", ChoiceOnce) {
		t.Fatal("bob answered alice's question")
	}
	if !p.answer("q1", "alice", ChoiceOnce) || <-q.answer != ChoiceOnce {
		t.Fatal("alice's answer was not delivered")
	}
	p.remove("q1")
	if p.answer("q1", "alice", ChoiceOnce) {
		t.Fatal("a removed question took an answer")
	}
}
