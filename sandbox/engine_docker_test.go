package sandbox

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// TestDockerConfig: a box's spec becomes Docker's configuration field for field: the
// volume a mount, a host's directory a bind (read-only with :ro), the limits with the
// process limit, the init asked for.
func TestDockerConfig(t *testing.T) {
	sp := boxapi.BoxSpec{
		Image: "img", Hostname: "sandbox", User: "root", WorkingDir: "/sandbox",
		Entrypoint: []string{"bash", "-c", "x"}, Cmd: []string{"y"}, Labels: map[string]string{"a": "b"},
		Mounts: []boxapi.Mount{
			{Volume: "vol", Source: "vol", Destination: "/sandbox"},
			{Source: "/run/mcp/d", Destination: "/run/direct", ReadOnly: true},
			{Source: "/srv/rw", Destination: "/rw"},
		},
		NetworkMode: "none", RestartPolicy: "unless-stopped", Init: true, Runtime: "runsc",
		Limits:  boxapi.Limits{Memory: 1 << 30, MemorySwap: 1 << 30, NanoCPUs: 1e9, PidsLimit: 512},
		CapDrop: []string{"NET_RAW"}, SecurityOpt: []string{"no-new-privileges"}, Sysctls: map[string]string{"k": "v"},
	}
	cfg, hc := dockerConfig(sp)
	if cfg.Image != "img" || cfg.Hostname != "sandbox" || cfg.User != "root" || cfg.WorkingDir != "/sandbox" ||
		!slices.Equal(cfg.Entrypoint, sp.Entrypoint) || !slices.Equal(cfg.Cmd, sp.Cmd) || cfg.Labels["a"] != "b" {
		t.Errorf("config %+v", cfg)
	}
	if len(hc.Mounts) != 1 || hc.Mounts[0] != (mount.Mount{Type: mount.TypeVolume, Source: "vol", Target: "/sandbox"}) {
		t.Errorf("mounts %+v", hc.Mounts)
	}
	if !slices.Equal(hc.Binds, []string{"/run/mcp/d:/run/direct:ro", "/srv/rw:/rw"}) {
		t.Errorf("binds %q", hc.Binds)
	}
	if hc.Memory != 1<<30 || hc.MemorySwap != 1<<30 || hc.NanoCPUs != 1e9 || hc.PidsLimit == nil || *hc.PidsLimit != 512 {
		t.Errorf("resources %+v", hc.Resources)
	}
	if hc.Init == nil || !*hc.Init || hc.Runtime != "runsc" || hc.NetworkMode != "none" ||
		hc.RestartPolicy.Name != container.RestartPolicyUnlessStopped || hc.CapDrop[0] != "NET_RAW" || hc.Sysctls["k"] != "v" {
		t.Errorf("host config %+v", hc)
	}
}

// TestDockerBox: Docker's inspect reads back as the spec it was made from, with its
// state's times parsed (Docker's zero time as none).
func TestDockerBox(t *testing.T) {
	sp := boxapi.BoxSpec{Image: "img", Labels: map[string]string{"a": "b"}, NetworkMode: "none", RestartPolicy: "always",
		Limits: boxapi.Limits{Memory: 64 << 20, MemorySwap: 64 << 20, NanoCPUs: 5e8, PidsLimit: 64}, Runtime: "runc",
		CapDrop: []string{"NET_RAW"}, Mounts: []boxapi.Mount{{Volume: "vol", Source: "/var/lib/docker/volumes/vol/_data", Destination: "/sandbox"}}}
	cfg, hc := dockerConfig(sp)
	started := time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)
	info := container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{ID: "id1", Name: "/box", Image: "sha256:abc", Created: started.Format(time.RFC3339Nano),
			RestartCount: 2, HostConfig: hc, State: &container.State{Status: "running", Running: true,
				StartedAt: started.Format(time.RFC3339Nano), FinishedAt: "0001-01-01T00:00:00Z"}},
		Config: cfg,
		Mounts: []container.MountPoint{{Type: mount.TypeVolume, Name: "vol", Source: "/var/lib/docker/volumes/vol/_data", Destination: "/sandbox", RW: true}},
	}
	b := dockerBox(info)
	if b.ID != "id1" || b.Name != "box" || b.ImageID != "sha256:abc" || b.RestartCount != 2 || !b.Created.Equal(started) {
		t.Errorf("box %+v", b)
	}
	if st := b.State; !st.Running || st.Status != boxapi.StateRunning || !st.StartedAt.Equal(started) || !st.FinishedAt.IsZero() {
		t.Errorf("state %+v", st)
	}
	got := b.Spec
	if got.Image != "img" || got.Labels["a"] != "b" || got.NetworkMode != "none" || got.RestartPolicy != "always" ||
		got.Limits != sp.Limits || got.Runtime != "runc" || !slices.Equal(got.CapDrop, sp.CapDrop) ||
		len(got.Mounts) != 1 || got.Mounts[0] != sp.Mounts[0] {
		t.Errorf("spec %+v, want %+v", got, sp)
	}
	if b := dockerBox(container.InspectResponse{}); b.ID != "" || b.State.Running {
		t.Errorf("an empty inspect: %+v", b)
	}
}

// TestUsageOf: CPU over the time between two samples, memory without the page cache
// the kernel can drop, and no CPU from one sample.
func TestUsageOf(t *testing.T) {
	at := time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)
	var a, b container.StatsResponse
	a.Read, b.Read = at, at.Add(500*time.Millisecond)
	a.CPUStats.CPUUsage.TotalUsage, b.CPUStats.CPUUsage.TotalUsage = 1e9, 1e9+25e7
	b.MemoryStats.Usage, b.MemoryStats.Limit = 100<<20, 1<<30
	b.MemoryStats.Stats = map[string]uint64{"inactive_file": 30 << 20}
	b.PidsStats.Current, b.PidsStats.Limit = 7, 512
	u := usageOf(a, b, true)
	if u.CPU < 0.49 || u.CPU > 0.51 || u.Memory != 70<<20 || u.MemoryCache != 30<<20 || u.MemoryLimit != 1<<30 || u.PIDs != 7 || u.PIDsLimit != 512 {
		t.Errorf("usage %+v, want half a CPU, 70 MiB used and 30 cached of 1 GiB, 7 of 512 processes", u)
	}
	if u := usageOf(b, b, false); u.CPU != -1 || u.Memory != 70<<20 {
		t.Errorf("one sample: %+v", u)
	}
	b.MemoryStats.Limit, b.PidsStats.Limit = ^uint64(0), ^uint64(0) // none: the largest value
	if u := usageOf(a, b, true); u.MemoryLimit < 0 || u.PIDsLimit < 0 {
		t.Errorf("no limits read as negative: %+v", u)
	}
}

// TestSharedDocker: callers with one key get one client, made once; a caller's Close
// leaves it working for the others (it only closes idle connections); another key
// gets a client of its own.
func TestSharedDocker(t *testing.T) {
	local := dockerClient(t) // skips without an engine
	key := "test\x00" + t.Name()
	made := 0
	newClient := func() (*client.Client, error) {
		made++
		return client.NewClientWithOpts(client.WithHost(local.DaemonHost()), client.WithAPIVersionNegotiation())
	}
	a, err := SharedDocker(key, newClient)
	if err != nil {
		t.Fatal(err)
	}
	b, err := SharedDocker(key, newClient)
	if err != nil {
		t.Fatal(err)
	}
	if made != 1 || a.(dockerEngine).Client != b.(dockerEngine).Client {
		t.Fatalf("two callers of one key: %d clients made, same client %v", made, a.(dockerEngine).Client == b.(dockerEngine).Client)
	}
	ctx := t.Context()
	if _, err := a.EngineInfo(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.EngineInfo(ctx); err != nil {
		t.Fatalf("after the other caller's Close: %v", err)
	}
	c, err := SharedDocker(key+"-other", newClient)
	if err != nil {
		t.Fatal(err)
	}
	if made != 2 || c.(dockerEngine).Client == a.(dockerEngine).Client {
		t.Errorf("another key: %d clients made, want 2 and a client of its own", made)
	}
	if _, err := SharedDocker(key+"-bad", func() (*client.Client, error) { return nil, errors.New("no such engine") }); err == nil {
		t.Error("a client that cannot be made: no error")
	}
	if _, err := SharedDocker(key+"-bad", newClient); err != nil || made != 3 {
		t.Errorf("a failed make is not kept: made %d, %v", made, err)
	}
}
