package mcpsandbox

import (
	"context"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/links"
)

// previewOwner names person's sandbox in the preview registry: the Docker host and the
// container, as the operator's always was.
func (h *Handler) previewOwner(person string) string {
	cfg, _ := h.SandboxConfigFor(person)
	return h.fleet.Operator().Engine().Host + "\x00" + cfg.Container
}

// previewOwners tells the preview server whose previews it serves, and the key that
// opens each (the operator's API key, or the person's own).
func (h *Handler) previewOwners(owner string) (key string, ok bool) {
	person, ok := h.personOfOwner(owner)
	switch {
	case !ok:
		return "", false
	case person == "":
		return h.APIKey, true
	}
	return h.Person(person).Key, true
}

// personOfOwner is the person whose preview owner is owner. Every preview request
// asks, so the owners are listed once.
func (h *Handler) personOfOwner(owner string) (string, bool) {
	h.ownersOnce.Do(func() {
		h.owners = map[string]string{h.previewOwner(""): ""}
		for _, p := range h.People {
			h.owners[h.previewOwner(p.Name)] = p.Name
		}
	})
	person, ok := h.owners[owner]
	return person, ok
}

// linkFiles is the sandbox a link of owner reaches: the person's, who must still be
// configured, or the operator's.
func (h *Handler) linkFiles(ctx context.Context, owner string) (links.Files, error) {
	if owner != "" && h.Person(owner) == nil {
		return nil, links.ErrNoOwner
	}
	e, err := h.fleet.For(ctx, owner)
	if err != nil {
		return nil, err
	}
	return e.Sandbox(), nil
}

// personLabel is how metrics name a person: "-" for the operator.
func personLabel(person string) string {
	if person == "" {
		return "-"
	}
	return person
}
