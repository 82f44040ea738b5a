package sandbox

import (
	"testing"

	"github.com/docker/docker/client"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// stated is an engine that states its capabilities, as the Kubernetes engine does.
type stated struct{ dockerEngine }

func (stated) Capabilities() boxapi.Capabilities { return boxapi.Capabilities{ExecPIDs: true} }

// TestCapabilitiesOf: a Docker engine can do everything, and mounts this machine's
// directories only when it is on this machine; an engine that states its capabilities
// is taken at its word, whatever its address.
func TestCapabilitiesOf(t *testing.T) {
	lc, err := client.NewClientWithOpts(client.WithHost("unix:///var/run/docker.sock"))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := client.NewClientWithOpts(client.WithHost("tcp://127.0.0.1:2375"))
	if err != nil {
		t.Fatal(err)
	}
	local, remote := dockerEngine{lc}, dockerEngine{rc}
	all := boxapi.Capabilities{Checkpoints: true, HelperContainers: true, Pause: true, ExecPIDs: true}
	withFiles := all
	withFiles.LocalFiles = true
	for _, c := range []struct {
		name string
		cli  API
		want boxapi.Capabilities
	}{
		{"docker here", local, withFiles},
		{"docker elsewhere", remote, all},
		{"stated", stated{local}, boxapi.Capabilities{ExecPIDs: true}},
		{"none", nil, boxapi.Capabilities{}},
	} {
		if got := capabilitiesOf(c.cli); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	if sb := wire(remote, Config{}, nil); sb.files.caps() != all || sb.link.caps() != all {
		t.Errorf("the parts do not share the engine's capabilities: %+v", sb.files.caps())
	}
}
