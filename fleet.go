package mcpsandbox

import (
	"context"
	"fmt"
	"sync"
)

// This file resolves the sandbox of a request from its person: the operator's is the
// one Provision acquired; a person's is acquired from the pool on their first call
// (no Docker I/O: the container is created by the first command), and kept until the
// config is cleaned up.

// personBoxes are the people's sandboxes a handler holds.
type personBoxes struct {
	mu      sync.Mutex
	entries map[string]*sandboxEntry // by person
	keys    []string                 // pool keys to release
}

// sandboxFor returns the sandbox of person ("" for the operator). A person beyond
// max_sandboxes gets an error that names the setting.
func (h *Handler) sandboxFor(_ context.Context, person string) (*sandboxEntry, error) {
	if person == "" {
		return h.entry, nil
	}
	b := &h.boxes
	b.mu.Lock()
	defer b.mu.Unlock()
	if e := b.entries[person]; e != nil {
		return e, nil
	}
	if h.MaxSandboxes > 0 && len(b.entries) >= h.MaxSandboxes {
		return nil, fmt.Errorf("this server already keeps %d sandboxes, the most its operator allows (max_sandboxes); ask the operator to raise max_sandboxes", len(b.entries))
	}
	cfg, err := h.sandboxConfigFor(person)
	if err != nil {
		return nil, err
	}
	e, key, err := h.app.acquire(cfg)
	if err != nil {
		return nil, err
	}
	e.startCleanup()
	if b.entries == nil {
		b.entries = map[string]*sandboxEntry{}
	}
	b.entries[person] = e
	b.keys = append(b.keys, key)
	return e, nil
}

// heldSandbox returns person's sandbox if this handler holds it already, without
// acquiring one.
func (h *Handler) heldSandbox(person string) *sandboxEntry {
	if person == "" {
		return h.entry
	}
	h.boxes.mu.Lock()
	defer h.boxes.mu.Unlock()
	return h.boxes.entries[person]
}

// releaseSandboxes gives back the people's sandboxes.
func (h *Handler) releaseSandboxes() error {
	h.boxes.mu.Lock()
	keys := h.boxes.keys
	h.boxes.keys, h.boxes.entries = nil, nil
	h.boxes.mu.Unlock()
	var err error
	for _, k := range keys {
		if e := release(k); e != nil && err == nil {
			err = e
		}
	}
	return err
}
