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

// Locker is a [KV] that can hold a key against other writers, as Caddy's storage
// does across the instances that share it.
type Locker interface {
	Lock(ctx context.Context, name string) error
	Unlock(ctx context.Context, name string) error
}

// approvalsFresh is how long a read of the list serves before it is read again:
// other Caddy instances sharing the storage change it too.
const approvalsFresh = 2 * time.Second

// ApprovalStore is the [Approvals] of a site, kept in a [KV] under one key. A read
// serves for approvalsFresh; a change reads the list afresh and writes it through,
// under the KV's lock when it has one, so that instances sharing the storage see
// each other's changes within seconds and lose none.
type ApprovalStore struct {
	kv  KV
	key string
	now func() time.Time

	mu     sync.Mutex
	loaded time.Time // when list was read; zero: never
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

// load reads the list unless a read within approvalsFresh serves (fresh: read it
// anyway); the caller holds mu. A failed read keeps the list read before.
func (s *ApprovalStore) load(ctx context.Context, fresh bool) error {
	if !fresh && !s.loaded.IsZero() && s.now().Sub(s.loaded) < approvalsFresh {
		return nil
	}
	b, err := s.kv.Load(ctx, s.key)
	var list []Approval
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("reading the egress approvals: %w", err)
	default:
		if err := json.Unmarshal(b, &list); err != nil {
			return fmt.Errorf("reading the egress approvals (%s in storage is not what this plugin wrote; delete it to start afresh): %w", s.key, err)
		}
	}
	s.list, s.loaded = list, s.now()
	return nil
}

// change reads the list afresh under the KV's lock, applies edit, and writes the
// list when edit says it changed.
func (s *ApprovalStore) change(ctx context.Context, edit func() bool) error {
	if l, ok := s.kv.(Locker); ok {
		if err := l.Lock(ctx, s.key); err != nil {
			return fmt.Errorf("locking the egress approvals: %w", err)
		}
		defer func() { _ = l.Unlock(context.WithoutCancel(ctx), s.key) }()
	}
	if err := s.load(ctx, true); err != nil {
		return err
	}
	if !edit() {
		return nil
	}
	if err := s.save(ctx); err != nil {
		s.loaded = time.Time{} // the change is not kept: read the list again
		return err
	}
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

// Approved reports whether person allowed host:port always. A store never read (its
// storage failing) approves nothing; one that fails later serves its last read.
func (s *ApprovalStore) Approved(person, host string, port int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.load(context.Background(), false) != nil && s.loaded.IsZero() {
		return false
	}
	id := ApprovalID(person, host, port)
	return slices.ContainsFunc(s.list, func(a Approval) bool { return a.ID == id })
}

// Approve keeps person's approval of host:port.
func (s *ApprovalStore) Approve(ctx context.Context, person, host string, port int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := ApprovalID(person, host, port)
	return s.change(ctx, func() bool {
		if slices.ContainsFunc(s.list, func(a Approval) bool { return a.ID == id }) {
			return false
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
		return true
	})
}

// List is every approval, oldest first.
func (s *ApprovalStore) List(ctx context.Context) ([]Approval, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.load(ctx, false); err != nil {
		return nil, err
	}
	return slices.Clone(s.list), nil
}

// Revoke drops the approval with id; it reports whether there was one.
func (s *ApprovalStore) Revoke(ctx context.Context, id string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	found := false
	err := s.change(ctx, func() bool {
		i := slices.IndexFunc(s.list, func(a Approval) bool { return strings.EqualFold(a.ID, id) })
		if found = i >= 0; found {
			s.list = slices.Delete(s.list, i, i+1)
		}
		return found
	})
	return found, err
}
