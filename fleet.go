package mcpsandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/client"
	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/metrics"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// This file resolves the sandbox of a person: the engine it is placed on (engine
// lines), its activity, and stopping it when idle (idle_stop) and starting it again.

// placementPrefix is where Caddy's storage records which engine each sandbox
// container is on: <prefix>/<container>.
const placementPrefix = "mcp_sandbox/placement/"

// engineProbeTimeout bounds asking one engine, while placing, whether it has a
// container or how many: an engine that does not answer in time is left out.
const engineProbeTimeout = 5 * time.Second

// idleState is a sandbox's activity: when it was last used, the calls under way, and
// whether this process stopped it for idleness.
type idleState struct {
	last atomic.Int64 // Unix nanoseconds of the last use
	busy atomic.Int32 // commands under way (execute, job_output)

	mu      sync.Mutex  // held while the container is stopped or started again
	stopped atomic.Bool // by this process, for idleness (set under mu)
}

// Touch records a use of the sandbox: a tool call, a preview request, an upload or a
// download.
func (e *sandboxEntry) Touch() { e.idle.last.Store(time.Now().UnixNano()) }

// idleFor is how long the sandbox has not been used; 0 while a command runs.
func (e *sandboxEntry) idleFor() time.Duration {
	if e.idle.busy.Load() > 0 {
		return 0
	}
	return time.Since(time.Unix(0, e.idle.last.Load()))
}

// begin counts a command under way until the returned function is called.
func (e *sandboxEntry) begin() func() {
	e.Touch()
	e.idle.busy.Add(1)
	return func() { e.Touch(); e.idle.busy.Add(-1) }
}

// egressAwait bounds how long a command waits for the egress proxy to listen in a
// container that was just started.
const egressAwait = 10 * time.Second

// awaitEgress makes sure, before a command runs, that the container runs and the
// egress proxy listens in it: the listener never starts the container itself, it
// follows the start a call makes. It gives up after egressAwait, or at once when the
// agent cannot run (the sandbox is then offline, and says so).
func (e *sandboxEntry) awaitEgress(ctx context.Context) {
	if e.egress == nil || e.sb.Config().NoAgent || e.sb.Listening(egressPort) {
		return
	}
	if err := e.sb.Ensure(ctx); err != nil {
		return // the command meets it and says it
	}
	if running, err := e.sb.Running(ctx); err != nil || !running {
		return // stopped behind our back: the command's own Ensure starts it
	}
	ctx, cancel := context.WithTimeout(ctx, egressAwait)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !e.sb.Listening(egressPort) {
		if running, why := e.sb.AgentStatus(); !running && why != "" {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// resume starts the container again if it was stopped for idleness.
func (e *sandboxEntry) resume(ctx context.Context) error {
	e.idle.mu.Lock()
	defer e.idle.mu.Unlock()
	if !e.idle.stopped.Load() {
		return nil
	}
	begin := time.Now()
	if err := e.sb.Start(ctx); err != nil {
		return e.engineError(err)
	}
	e.idle.stopped.Store(false)
	e.logger.Info("started an idle-stopped sandbox again", zap.String("container", e.sb.Config().Container),
		zap.String("engine", e.engine.Name), zap.Duration("took", time.Since(begin)))
	return nil
}

// stopIfIdle stops the container when it has been idle for d and no job wrote output
// in that time. It reports whether it stopped it.
func (e *sandboxEntry) stopIfIdle(ctx context.Context, d time.Duration) (bool, error) {
	if e.idleFor() < d {
		return false, nil
	}
	e.idle.mu.Lock()
	defer e.idle.mu.Unlock()
	if e.idle.stopped.Load() {
		return false, nil
	}
	// Stopped already (by the operator, or before this process): nothing to stop.
	if running, err := e.sb.Running(ctx); err != nil || !running {
		return false, err
	}
	busy, err := e.sb.JobOutputSince(ctx, time.Now().Add(-d))
	if err != nil {
		return false, err
	}
	if busy {
		e.Touch()
		return false, nil
	}
	if e.idleFor() < d { // used while job output was looked for
		return false, nil
	}
	if err := e.sb.Stop(ctx, "idle_stop"); err != nil {
		return false, err
	}
	e.idle.stopped.Store(true)
	return true, nil
}

// engineError says which engine did not answer, when that is what err means.
func (e *sandboxEntry) engineError(err error) error {
	if !sandbox.EngineDown(err) {
		return err
	}
	name := e.engine.Name
	if name == "" {
		name = e.engine.Host
	}
	return fmt.Errorf("its Docker engine %s does not answer (the operator must bring it back; try again later): %w", name, err)
}

// sandboxFor returns the sandbox of person ("" is the operator's), placing it on an
// engine when it has none yet and starting it again when it was stopped for
// idleness. It counts as a use of the sandbox.
func (h *Handler) sandboxFor(ctx context.Context, person string) (*sandboxEntry, error) {
	e, err := h.placedEntry(ctx, person)
	if err != nil {
		return nil, err
	}
	e.Touch()
	if err := e.resume(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// placedEntry finds the pooled sandbox of person, placing it the first time. The
// operator's sandbox is the handler's own, on the first engine.
func (h *Handler) placedEntry(ctx context.Context, person string) (*sandboxEntry, error) {
	if person == "" {
		return h.entry, nil
	}
	if e := h.placedNow(person); e != nil {
		return e, nil
	}
	// Placements run one at a time, without holding up the people already placed.
	h.placeMu.Lock()
	defer h.placeMu.Unlock()
	if e := h.placedNow(person); e != nil {
		return e, nil
	}
	cfg, err := h.sandboxConfigFor(person)
	if err != nil {
		return nil, err
	}
	if err := h.checkMaxSandboxes(ctx, cfg.Container); err != nil {
		return nil, err
	}
	eng := Engine{}
	if len(h.Engines) > 0 {
		if eng, err = h.place(ctx, cfg.Container); err != nil {
			return nil, err
		}
	}
	cfg.Engine = eng.Name
	e, key, err := h.app.acquire(eng, cfg)
	if err != nil {
		return nil, err
	}
	if err := h.setupEgress(e, person); err != nil {
		return nil, errors.Join(err, release(key))
	}
	e.startCleanup()
	if e.egress != nil {
		e.egress.Start()
	}
	h.fleetMu.Lock()
	defer h.fleetMu.Unlock()
	if h.released { // a call that outlived this config: nothing would give the sandbox back
		return nil, errors.Join(sandbox.ErrClosed, release(key))
	}
	if h.placed == nil {
		h.placed = map[string]*sandboxEntry{}
	}
	h.placed[person] = e
	h.placedKeys = append(h.placedKeys, key)
	recentPlacements.Store(cfg.Container, time.Now())
	return e, nil
}

// placedNow is the sandbox of person if it is placed already.
func (h *Handler) placedNow(person string) *sandboxEntry {
	h.fleetMu.Lock()
	defer h.fleetMu.Unlock()
	return h.placed[person]
}

// heldSandbox returns person's sandbox if this handler holds it already, without
// placing one or counting a use.
func (h *Handler) heldSandbox(person string) *sandboxEntry {
	if person == "" {
		return h.entry
	}
	return h.placedNow(person)
}

// placement is what storage records of a sandbox container.
type placement struct {
	Engine string    `json:"engine"`
	Placed time.Time `json:"placed"`
}

// place finds the engine of the sandbox container name: the one storage records,
// else one that has the container (its label says so too: storage was lost, or the
// container was made by hand), else the engine with the fewest sandboxes among those
// that answer, which is then recorded.
func (h *Handler) place(ctx context.Context, name string) (Engine, error) {
	key := placementPrefix + name
	// Instances sharing the storage place each sandbox once.
	if err := h.storage.Lock(ctx, key); err != nil {
		return Engine{}, fmt.Errorf("locking the placement of %s: %w", name, err)
	}
	defer func() {
		if err := h.storage.Unlock(context.WithoutCancel(ctx), key); err != nil {
			h.logger.Warn("unlocking a placement", zap.String("container", name), zap.Error(err))
		}
	}()
	b, err := h.storage.Load(ctx, key)
	switch {
	case err == nil:
		var p placement
		if err := json.Unmarshal(b, &p); err != nil {
			return Engine{}, fmt.Errorf("reading the placement of %s: %w", name, err)
		}
		for _, e := range h.Engines {
			if e.Name == p.Engine {
				return e, nil
			}
		}
		return Engine{}, fmt.Errorf("this sandbox is on the Docker engine %q, which the configuration no longer names; the operator must add its engine line back", p.Engine)
	case !errors.Is(err, fs.ErrNotExist):
		return Engine{}, fmt.Errorf("reading the placement of %s: %w", name, err)
	}
	probes := make([]engineProbe, len(h.Engines))
	var wg sync.WaitGroup
	for i, eng := range h.Engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			probes[i] = h.probeEngine(ctx, eng, name)
		}()
	}
	wg.Wait()
	best := -1
	for i, p := range probes {
		if p.err != nil {
			h.logger.Warn("engine left out of placement", zap.String("engine", h.Engines[i].Name), zap.Error(p.err))
			continue
		}
		if p.exists {
			best = i
			break
		}
		if best < 0 || p.count < probes[best].count {
			best = i
		}
	}
	if best < 0 {
		return Engine{}, errors.New("none of the configured Docker engines answers; try again later")
	}
	eng := h.Engines[best]
	b, _ = json.Marshal(placement{Engine: eng.Name, Placed: time.Now().UTC()})
	if err := h.storage.Store(ctx, key, b); err != nil {
		return Engine{}, fmt.Errorf("recording the placement of %s: %w", name, err)
	}
	h.logger.Info("placed a sandbox", zap.String("container", name), zap.String("engine", eng.Name),
		zap.Bool("existed", probes[best].exists), zap.Int("sandboxes_there", probes[best].count))
	return eng, nil
}

// engineProbe is what placing learnt of an engine.
type engineProbe struct {
	exists bool // it has the container
	count  int  // the sandboxes it holds
	err    error
}

// probeEngine asks an engine whether it has the container name and how many sandboxes
// it holds.
func (h *Handler) probeEngine(ctx context.Context, eng Engine, name string) (p engineProbe) {
	cli, err := newEngineClient(eng)
	if err != nil {
		p.err = err
		return p
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, engineProbeTimeout)
	defer cancel()
	if p.exists, p.err = sandbox.Exists(ctx, cli, name); p.err != nil || p.exists {
		return p
	}
	p.count, p.err = sandbox.Count(ctx, cli)
	return p
}

// releaseFleet gives back the people's sandboxes this handler placed.
func (h *Handler) releaseFleet() error {
	h.fleetMu.Lock()
	keys := h.placedKeys
	h.placed, h.placedKeys, h.released = nil, nil, true
	h.fleetMu.Unlock()
	var errs []error
	for _, k := range keys {
		errs = append(errs, release(k))
	}
	return errors.Join(errs...)
}

// fleetEntries are the sandboxes this handler uses: the operator's and the people's.
func (h *Handler) fleetEntries() []*sandboxEntry {
	h.fleetMu.Lock()
	defer h.fleetMu.Unlock()
	out := []*sandboxEntry{h.entry}
	for _, e := range h.placed {
		if e != h.entry {
			out = append(out, e)
		}
	}
	return out
}

// idleCheckEvery is how often idle sandboxes are looked for: a quarter of idle_stop,
// between 1s and a minute.
func idleCheckEvery(d time.Duration) time.Duration {
	return min(max(d/4, time.Second), time.Minute)
}

// startIdleStops starts the loop that stops idle sandboxes, when idle_stop is set.
// Cleanup ends it.
func (h *Handler) startIdleStops() {
	if h.IdleStop <= 0 {
		return
	}
	d := time.Duration(h.IdleStop)
	h.goBackground(func(ctx context.Context) {
		t := time.NewTicker(idleCheckEvery(d))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			for _, e := range h.fleetEntries() {
				h.stopIdle(ctx, e, d)
			}
		}
	})
}

// goBackground runs f in a goroutine of its own until Cleanup cancels its context.
func (h *Handler) goBackground(f func(ctx context.Context)) {
	h.idleMu.Lock()
	defer h.idleMu.Unlock()
	if h.bgCancel == nil {
		h.bgCtx, h.bgCancel = context.WithCancel(context.Background())
	}
	h.bg.Add(1)
	ctx := h.bgCtx
	go func() {
		defer h.bg.Done()
		defer func() {
			if v := recover(); v != nil {
				h.logger.Error("panic in a sandbox loop", zap.Any("panic", v))
			}
		}()
		f(ctx)
	}()
}

func (h *Handler) stopIdle(ctx context.Context, e *sandboxEntry, d time.Duration) {
	defer func() {
		if v := recover(); v != nil {
			h.logger.Error("panic while stopping an idle sandbox", zap.Any("panic", v))
		}
	}()
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	stopped, err := e.stopIfIdle(sctx, d)
	switch {
	case err != nil && ctx.Err() == nil:
		h.logger.Warn("checking an idle sandbox", zap.String("container", e.sb.Config().Container), zap.Error(err))
	case stopped:
		metrics.IdleStops.Inc()
		h.logger.Info("stopped an idle sandbox; /sandbox is kept, the next call starts it again",
			zap.String("container", e.sb.Config().Container), zap.String("engine", e.engine.Name), zap.Duration("idle_stop", d))
	}
}

// stopBackground ends the loops goBackground started and waits for them.
func (h *Handler) stopBackground() {
	h.idleMu.Lock()
	cancel := h.bgCancel
	h.idleMu.Unlock()
	if cancel != nil {
		cancel()
	}
	h.bg.Wait()
}

// recentPlacements are the people's containers placed by this process, by name, with
// when: shared across reloads, so that a container placed and not made yet counts
// against max_sandboxes under the next configuration too.
var recentPlacements sync.Map

// placementCounts is how long a placement counts while its container does not exist:
// the first Ensure makes it within that, or failed.
const placementCounts = 2 * time.Minute

// existingSandbox is a person's sandbox container of this site found on an engine.
type existingSandbox struct {
	sandbox.Container
	Person string // whose, from its name (and label)
	Engine Engine
}

// existingSandboxes lists the people's sandbox containers of this site that exist on
// its engines, running or stopped, configured or not. An engine that does not answer
// is left out (and logged).
func (h *Handler) existingSandboxes(ctx context.Context) []existingSandbox {
	base, err := h.sandboxConfig()
	if err != nil {
		return nil
	}
	engines := h.Engines
	if len(engines) == 0 {
		engines = []Engine{{Host: h.host}}
	}
	lists := make([][]existingSandbox, len(engines))
	var wg sync.WaitGroup
	for i, eng := range engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cli, done, err := h.engineClient(eng)
			if err != nil {
				h.logger.Warn("listing sandboxes", zap.String("engine", eng.Name), zap.Error(err))
				return
			}
			if cli == nil { // no engine to ask (a configuration never provisioned)
				done()
				return
			}
			defer done()
			lctx, cancel := context.WithTimeout(ctx, engineProbeTimeout)
			defer cancel()
			list, err := sandbox.Containers(lctx, cli)
			if err != nil {
				h.logger.Warn("listing sandboxes", zap.String("engine", eng.Name), zap.Error(err))
				return
			}
			for _, c := range list {
				if person, ok := personOfContainer(base, c, h.configured); ok && !h.app.configuresOther(c.Name, h) {
					lists[i] = append(lists[i], existingSandbox{Container: c, Person: person, Engine: eng})
				}
			}
		}()
	}
	wg.Wait()
	var out []existingSandbox
	seen := map[string]bool{}
	for _, l := range lists {
		for _, x := range l {
			if !seen[x.Name] {
				seen[x.Name] = true
				out = append(out, x)
			}
		}
	}
	return out
}

// personOfContainer tells whether c is a person's sandbox of the site whose operator
// sandbox is base, and whose: named <container>-<person> and labelled with that
// person. A container made before the label is taken for the person's only while that
// person is configured (configured says so) and it is on the volume <volume>-<person>:
// unlabelled, it could as well be another server's sandbox named that way, which is
// never stopped or listed as removed.
func personOfContainer(base sandbox.Config, c sandbox.Container, configured func(string) bool) (string, bool) {
	name, ok := strings.CutPrefix(c.Name, base.Container+"-")
	if !ok || !personName.MatchString(name) {
		return "", false
	}
	if c.Person != "" {
		return name, c.Person == name
	}
	return name, configured(name) && c.Volume == base.Volume+"-"+name
}

// configured reports whether person is named by a person line.
func (h *Handler) configured(person string) bool { return h.person(person) != nil }

// engineClient is a client of eng and the function that closes it: the site's own
// for the engine of its operator's sandbox.
func (h *Handler) engineClient(eng Engine) (*client.Client, func(), error) {
	if eng.Name == "" || (len(h.Engines) > 0 && eng == h.Engines[0]) {
		return h.docker, func() {}, nil
	}
	cli, err := newEngineClient(eng)
	if err != nil {
		return nil, nil, err
	}
	return cli, func() { cli.Close() }, nil
}

// checkMaxSandboxes refuses to place the new container name when max_sandboxes
// people's sandboxes of this site exist already (on the engines, or placed by this
// process moments ago), whatever configuration placed them. A container that exists
// is no new sandbox.
func (h *Handler) checkMaxSandboxes(ctx context.Context, name string) error {
	if h.MaxSandboxes <= 0 {
		return nil
	}
	have := map[string]bool{}
	for _, x := range h.existingSandboxes(ctx) {
		have[x.Name] = true
	}
	if have[name] {
		return nil
	}
	base, _ := h.sandboxConfig()
	recentPlacements.Range(func(k, v any) bool {
		n := k.(string)
		if strings.HasPrefix(n, base.Container+"-") && time.Since(v.(time.Time)) < placementCounts {
			have[n] = true
		}
		return true
	})
	if have[name] {
		return nil
	}
	if n := len(have); n >= h.MaxSandboxes {
		return fmt.Errorf("this server already keeps %d sandboxes, the most its operator allows (max_sandboxes); ask the operator to raise max_sandboxes or to delete the sandbox of someone who left", n)
	}
	return nil
}

// removedSandboxes are the existing sandboxes of people this configuration no longer
// names.
func (h *Handler) removedSandboxes(ctx context.Context) []existingSandbox {
	var out []existingSandbox
	for _, x := range h.existingSandboxes(ctx) {
		if h.person(x.Person) == nil {
			out = append(out, x)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Person < out[j].Person })
	return out
}

// removedSandbox is the sandbox of person if they were removed and it still exists.
func (h *Handler) removedSandbox(ctx context.Context, person string) (*sandbox.Sandbox, func(), error) {
	for _, x := range h.removedSandboxes(ctx) {
		if x.Person == person {
			return h.removedView(x)
		}
	}
	return nil, nil, errNoRemoved
}

var errNoRemoved = errors.New("no such removed person's sandbox")

// removedView is a Sandbox through which a removed person's container is looked at,
// stopped or deleted; done closes its client.
func (h *Handler) removedView(x existingSandbox) (*sandbox.Sandbox, func(), error) {
	cfg, err := h.sandboxConfig()
	if err != nil {
		return nil, nil, err
	}
	vol := cfg.Volume + "-" + x.Person
	if x.Volume != "" {
		vol = x.Volume
	}
	cfg.Container, cfg.Volume, cfg.Person, cfg.Engine = x.Name, vol, x.Person, x.Engine.Name
	cli, done, err := h.engineClient(x.Engine)
	if err != nil {
		return nil, nil, err
	}
	sb, err := sandbox.New(cli, cfg, h.logger.Named("sandbox"))
	if err != nil {
		done()
		return nil, nil, err
	}
	return sb, done, nil
}

// removedStopAgain is when the sandboxes of removed people are stopped a second time:
// a call still under way on the previous configuration may have started one.
const removedStopAgain = 10 * time.Second

// startRemovedStops stops, when the configuration starts and once more shortly after,
// the containers of people it no longer names: they are kept (the console lists them,
// with Stop and Delete) but nothing of theirs runs.
func (h *Handler) startRemovedStops() {
	h.goBackground(func(ctx context.Context) {
		for i, wait := range []time.Duration{0, removedStopAgain} {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			h.stopRemoved(ctx, i == 0)
		}
	})
}

func (h *Handler) stopRemoved(ctx context.Context, first bool) {
	for _, x := range h.removedSandboxes(ctx) {
		if x.State != "running" && x.State != "restarting" && x.State != "paused" {
			if first {
				h.logger.Info("sandbox of a person no longer configured is kept, stopped; the console deletes it",
					zap.String("person", x.Person), zap.String("container", x.Name), zap.String("engine", x.Engine.Name))
			}
			continue
		}
		sb, done, err := h.removedView(x)
		if err != nil {
			h.logger.Warn("stopping the sandbox of a removed person", zap.String("person", x.Person), zap.Error(err))
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		err = sb.Stop(sctx, "person removed from the configuration")
		cancel()
		done()
		if err != nil && ctx.Err() == nil {
			h.logger.Warn("stopping the sandbox of a removed person", zap.String("person", x.Person), zap.String("container", x.Name), zap.Error(err))
			continue
		}
		h.logger.Info("stopped the sandbox of a person no longer configured; it is kept, the console deletes it",
			zap.String("person", x.Person), zap.String("container", x.Name), zap.String("engine", x.Engine.Name))
	}
}
