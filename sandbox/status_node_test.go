package sandbox

import (
	"context"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
)

// inspectOnly answers ContainerInspect with a stopped container carrying labels; any
// other call panics (the embedded API is nil).
type inspectOnly struct {
	API
	labels map[string]string
}

func (f inspectOnly) ContainerInspect(context.Context, string) (container.InspectResponse, error) {
	return container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{ID: "id", State: &container.State{Status: "exited"}},
		Config:            &container.Config{Image: "img", Labels: f.labels},
	}, nil
}

// TestStatusNode: the node label an engine puts on the inspected container becomes
// Status.Node when it is a DNS name; anything else (hostile text, too long) is
// dropped, and a container without it has no node.
func TestStatusNode(t *testing.T) {
	for _, tc := range []struct{ label, want string }{
		{"worker-1.cluster.local", "worker-1.cluster.local"},
		{"127.0.0.1", "127.0.0.1"},
		{"", ""},
		{"Node<script>", ""},
		{"a\nb", ""},
		{strings.Repeat("a", 254), ""},
	} {
		labels := map[string]string{}
		if tc.label != "" {
			labels[LabelNode] = tc.label
		}
		sb, err := New(inspectOnly{labels: labels}, DefaultConfig(), nil)
		if err != nil {
			t.Fatal(err)
		}
		st, err := sb.Status(context.Background())
		if err != nil || st.Node != tc.want {
			t.Errorf("label %q: node %q (%v), want %q", tc.label, st.Node, err, tc.want)
		}
	}
}
