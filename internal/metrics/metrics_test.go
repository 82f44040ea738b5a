package metrics

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// engine is a Docker engine's answer for a scrape; a real engine cannot be made to
// fail on cue, so the unknown state needs this.
type engine struct {
	name   string
	states map[string]string
	err    bool
	lists  *int // counts the listings
}

func (e engine) Name() string { return e.name }
func (e engine) ID() string   { return "id-" + e.name }

func (e engine) States(_ context.Context, names []string) (map[string]string, error) {
	if e.lists != nil {
		*e.lists++
	}
	if e.err {
		return nil, errors.New("engine down")
	}
	out := map[string]string{}
	for _, n := range names {
		if s, ok := e.states[n]; ok {
			out[n] = s
		}
	}
	return out, nil
}

// gather returns the samples of reg as name{labels} -> value.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName() + "{"
			for i, l := range m.GetLabel() {
				if i > 0 {
					key += ","
				}
				key += l.GetName() + "=" + l.GetValue()
			}
			key += "}"
			out[key] = value(m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	}
	return -1
}

// TestSandboxesByEngineAndState: sandboxes count once per container and engine, by
// the state their engine reports; stopped for idleness when this process stopped
// them, missing when the engine holds no such container, unknown when it does not
// answer. Two sandboxes of one container (a reload) count once. Each sandbox holds an
// Engine value of its own (its own client): one engine is still listed once a scrape.
func TestSandboxesByEngineAndState(t *testing.T) {
	var lists int
	localStates := map[string]string{"a": "running", "b": "exited", "c": "exited", "d": "running"}
	local := func() engine { return engine{name: "", states: localStates, lists: &lists} }
	big := engine{name: "big", states: map[string]string{"e": "created"}, lists: &lists}
	down := engine{name: "down", err: true, lists: &lists}
	pool := []Sandbox{
		{Engine: local(), Container: "a"},
		{Engine: local(), Container: "a"}, // a reload: same container
		{Engine: local(), Container: "b", IdleStopped: true},
		{Engine: local(), Container: "c"},
		{Engine: local(), Container: "d", IdleStopped: true}, // started again behind our back
		{Engine: local(), Container: "gone"},
		{Engine: big, Container: "e"},
		{Engine: down, Container: "f"},
		{Engine: down, Container: "g"},
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(Sandboxes(func() []Sandbox { return pool }))
	got := gather(t, reg)
	want := map[string]float64{
		"caddy_mcp_sandbox_sandboxes{engine=,state=running}":     2,
		"caddy_mcp_sandbox_sandboxes{engine=,state=stopped}":     1,
		"caddy_mcp_sandbox_sandboxes{engine=,state=exited}":      1,
		"caddy_mcp_sandbox_sandboxes{engine=,state=missing}":     1,
		"caddy_mcp_sandbox_sandboxes{engine=big,state=created}":  1,
		"caddy_mcp_sandbox_sandboxes{engine=down,state=unknown}": 2,
	}
	if len(got) != len(want) {
		t.Errorf("got %d series, want %d: %v", len(got), len(want), got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	if lists != 3 {
		t.Errorf("a scrape listed %d times, want 3: once per engine", lists)
	}
}

// TestAgents: per container, running if any of its sandboxes runs through the agent,
// with their starts added, and the bytes of its processes a stop saved.
func TestAgents(t *testing.T) {
	pool := []Sandbox{
		{Container: "a", AgentRunning: false, AgentStarts: 1},
		{Container: "a", AgentRunning: true, AgentStarts: 2},
		{Container: "b", KeptBytes: 64 << 20},
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(Agents(func() []Sandbox { return pool }))
	got := gather(t, reg)
	want := map[string]float64{
		"caddy_mcp_sandbox_agent_running{container=a}":        1,
		"caddy_mcp_sandbox_agent_starts_total{container=a}":   3,
		"caddy_mcp_sandbox_agent_running{container=b}":        0,
		"caddy_mcp_sandbox_agent_starts_total{container=b}":   0,
		"caddy_mcp_sandbox_kept_processes_bytes{container=a}": 0,
		"caddy_mcp_sandbox_kept_processes_bytes{container=b}": 64 << 20,
	}
	if len(got) != len(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
}

// TestNamesAndRegister: the metric names are the documented ones (operators'
// dashboards depend on them), and registering with a second config's registry, or
// twice with one, keeps working.
func TestNamesAndRegister(t *testing.T) {
	cs := Collectors(func() []Sandbox { return nil }, func() int { return 3 })
	ch := make(chan *prometheus.Desc, 64)
	for _, c := range cs {
		c.Describe(ch)
	}
	close(ch)
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	var names []string
	for d := range ch {
		names = append(names, fq.FindStringSubmatch(d.String())[1])
	}
	slices.Sort(names)
	want := []string{
		"caddy_mcp_sandbox_agent_running",
		"caddy_mcp_sandbox_agent_starts_total",
		"caddy_mcp_sandbox_checkpoint_bytes",
		"caddy_mcp_sandbox_cleanup_deleted_total",
		"caddy_mcp_sandbox_idle_stops_total",
		"caddy_mcp_sandbox_kept_processes_bytes",
		"caddy_mcp_sandbox_person_calls_total",
		"caddy_mcp_sandbox_preview_bytes_total",
		"caddy_mcp_sandbox_preview_requests_total",
		"caddy_mcp_sandbox_previews_live",
		"caddy_mcp_sandbox_sandboxes",
	}
	if !slices.Equal(names, want) {
		t.Errorf("names = %v, want %v", names, want)
	}

	reg := prometheus.NewRegistry()
	if err := Register(reg, cs...); err != nil {
		t.Fatal(err)
	}
	if err := Register(reg, Collectors(func() []Sandbox { return nil }, func() int { return 3 })...); err != nil {
		t.Fatalf("registering a second config's collectors: %v", err)
	}
	if err := Register(nil, cs...); err != nil {
		t.Fatalf("no registry: %v", err)
	}
	if got := gather(t, reg)["caddy_mcp_sandbox_previews_live{}"]; got != 3 {
		t.Errorf("previews_live = %v, want 3", got)
	}
	// A different metric under a taken name is a real conflict, reported.
	clash := prometheus.NewGauge(prometheus.GaugeOpts{Name: "caddy_mcp_sandbox_idle_stops_total", Help: "x"})
	if err := Register(reg, clash); err == nil {
		t.Error("a clashing metric registered silently")
	}
}

// TestAdmission: the queue's figures are read at each scrape, under their names.
func TestAdmission(t *testing.T) {
	waiting, waited, waitedFor := int64(2), int64(7), 1500*time.Millisecond
	reg := prometheus.NewRegistry()
	if err := Register(reg, Admission(func() (int64, int64, time.Duration) { return waiting, waited, waitedFor })...); err != nil {
		t.Fatal(err)
	}
	check := func(wantWaiting, wantWaited, wantSecs float64) {
		t.Helper()
		got := gather(t, reg)
		if got["caddy_mcp_sandbox_commands_queued{}"] != wantWaiting || got["caddy_mcp_sandbox_commands_queued_total{}"] != wantWaited ||
			got["caddy_mcp_sandbox_command_queue_seconds_total{}"] != wantSecs {
			t.Errorf("scraped %v, want %v queued, %v in all, %v s", got, wantWaiting, wantWaited, wantSecs)
		}
	}
	check(2, 7, 1.5)
	waiting, waited, waitedFor = 0, 9, 2*time.Second
	check(0, 9, 2)
}
