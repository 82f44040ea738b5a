package egress

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// KV is where an [ApprovalStore] keeps its list: one value under one key. Load
// returns an error wrapping [fs.ErrNotExist] for a key never stored.
type KV interface {
	Load(ctx context.Context, key string) ([]byte, error)
	Store(ctx context.Context, key string, value []byte) error
}

// Approval is a host and port a person allowed always.
type Approval struct {
	ID     string    `json:"id"`
	Person string    `json:"person"`
	Host   string    `json:"host"`
	Port   int       `json:"port"`
	At     time.Time `json:"at"`
}

// MaxApprovals bounds the approvals kept per person; beyond it the oldest goes.
const MaxApprovals = 200

// ApprovalStore is the [Approvals] of a site, kept in a [KV] under one key and read
// once, on first use; every change is written through.
type ApprovalStore struct {
	kv  KV
	key string
	now func() time.Time

	mu     sync.Mutex
	loaded bool
	list   []Approval
}

// NewApprovalStore keeps approvals in kv under key; now is the clock (nil: time.Now).
func NewApprovalStore(kv KV, key string, now func() time.Time) *ApprovalStore {
	if now == nil {
		now = time.Now
	}
	return &ApprovalStore{kv: kv, key: key, now: now}
}

// ApprovalID is the id of person's approval of host:port.
func ApprovalID(person, host string, port int) string {
	s := sha256.Sum256([]byte(person + "\x00" + net.JoinHostPort(host, strconv.Itoa(port))))
	return hex.EncodeToString(s[:8])
}

// load reads the list once; the caller holds mu.
func (s *ApprovalStore) load(ctx context.Context) error {
	if s.loaded {
		return nil
	}
	b, err := s.kv.Load(ctx, s.key)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("reading the egress approvals: %w", err)
	default:
		if err := json.Unmarshal(b, &s.list); err != nil {
			return fmt.Errorf("reading the egress approvals (%s in storage is not what this plugin wrote; delete it to start afresh): %w", s.key, err)
		}
	}
	s.loaded = true
	return nil
}

func (s *ApprovalStore) save(ctx context.Context) error {
	b, err := json.Marshal(s.list)
	if err != nil {
		return err
	}
	if err := s.kv.Store(ctx, s.key, b); err != nil {
		return fmt.Errorf("keeping the egress approvals: %w", err)
	}
	return nil
}

// Approved reports whether person allowed host:port always. A store that cannot be
// read approves nothing.
func (s *ApprovalStore) Approved(person, host string, port int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.load(context.Background()) != nil {
		return false
	}
	id := ApprovalID(person, host, port)
	return slices.ContainsFunc(s.list, func(a Approval) bool { return a.ID == id })
}

// Approve keeps person's approval of host:port.
func (s *ApprovalStore) Approve(ctx context.Context, person, host string, port int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.load(ctx); err != nil {
		return err
	}
	id := ApprovalID(person, host, port)
	if slices.ContainsFunc(s.list, func(a Approval) bool { return a.ID == id }) {
		return nil
	}
	n := 0
	for _, a := range s.list {
		if a.Person == person {
			n++
		}
	}
	if n >= MaxApprovals {
		i := slices.IndexFunc(s.list, func(a Approval) bool { return a.Person == person })
		s.list = slices.Delete(s.list, i, i+1)
	}
	s.list = append(s.list, Approval{ID: id, Person: person, Host: host, Port: port, At: s.now().UTC()})
	return s.save(ctx)
}

// List is every approval, oldest first.
func (s *ApprovalStore) List(ctx context.Context) ([]Approval, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.load(ctx); err != nil {
		return nil, err
	}
	return slices.Clone(s.list), nil
}

// Revoke drops the approval with id; it reports whether there was one.
func (s *ApprovalStore) Revoke(ctx context.Context, id string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.load(ctx); err != nil {
		return false, err
	}
	i := slices.IndexFunc(s.list, func(a Approval) bool { return strings.EqualFold(a.ID, id) })
	if i < 0 {
		return false, nil
	}
	s.list = slices.Delete(s.list, i, i+1)
	return true, s.save(ctx)
}
