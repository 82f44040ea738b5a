package sandbox

import (
	"context"
	"strings"
	"testing"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// inspectOnly answers InspectBox with a stopped container on node; any other call
// panics (the embedded API is nil).
type inspectOnly struct {
	API
	node string
}

func (f inspectOnly) InspectBox(context.Context, string) (boxapi.Box, error) {
	return boxapi.Box{ID: "id", State: boxapi.BoxState{Status: "exited"}, Spec: boxapi.BoxSpec{Image: "img"}, Node: f.node}, nil
}

// TestStatusNode: the node an engine says the container runs on becomes Status.Node
// when it is a DNS name; anything else (hostile text, too long) is dropped, and a
// container without one has no node.
func TestStatusNode(t *testing.T) {
	for _, tc := range []struct{ node, want string }{
		{"worker-1.cluster.local", "worker-1.cluster.local"},
		{"127.0.0.1", "127.0.0.1"},
		{"", ""},
		{"Node<script>", ""},
		{"a\nb", ""},
		{strings.Repeat("a", 254), ""},
	} {
		sb, err := New(inspectOnly{node: tc.node}, DefaultConfig(), nil)
		if err != nil {
			t.Fatal(err)
		}
		st, err := sb.Status(context.Background())
		if err != nil || st.Node != tc.want {
			t.Errorf("node %q: status's node %q (%v), want %q", tc.node, st.Node, err, tc.want)
		}
	}
}
