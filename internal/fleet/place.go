package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// PlacementPrefix is where storage records which engine each sandbox container is on:
// <prefix><container>, a JSON object with the engine's name.
const PlacementPrefix = "mcp_sandbox/placement/"

// engineProbeTimeout bounds asking one engine, while placing, whether it has a
// container or how many: an engine that does not answer in time is left out.
const engineProbeTimeout = 5 * time.Second

// placement is what storage records of a sandbox container.
type placement struct {
	Engine string    `json:"engine"`
	Placed time.Time `json:"placed"`
}

// place finds the engine of the sandbox container name: the one storage records,
// else one that has the container (its label says so too: storage was lost, or the
// container was made by hand), else the engine with the fewest sandboxes among those
// that answer, which is then recorded. A Kubernetes engine is the only engine and
// places the pods itself: nothing is recorded or probed.
func (f *Fleet) place(ctx context.Context, name string) (Engine, error) {
	if eng, ok := Kubernetes(f.o.Engines); ok {
		return eng, nil
	}
	if f.o.Storage == nil {
		return Engine{}, errors.New("fleet: placing on engines needs Options.Storage")
	}
	key := PlacementPrefix + name
	// Instances sharing the storage place each sandbox once.
	if err := f.o.Storage.Lock(ctx, key); err != nil {
		return Engine{}, fmt.Errorf("locking the placement of %s: %w", name, err)
	}
	defer func() {
		if err := f.o.Storage.Unlock(context.WithoutCancel(ctx), key); err != nil {
			f.logger.Warn("unlocking a placement", zap.String("container", name), zap.Error(err))
		}
	}()
	b, err := f.o.Storage.Load(ctx, key)
	switch {
	case err == nil:
		var p placement
		if err := json.Unmarshal(b, &p); err != nil {
			return Engine{}, fmt.Errorf("reading the placement of %s: %w", name, err)
		}
		for _, e := range f.o.Engines {
			if e.Name == p.Engine {
				return e, nil
			}
		}
		return Engine{}, fmt.Errorf("this sandbox is on the Docker engine %q, which the configuration no longer names; the operator must add its engine line back", p.Engine)
	case !errors.Is(err, fs.ErrNotExist):
		return Engine{}, fmt.Errorf("reading the placement of %s: %w", name, err)
	}
	probes := make([]engineProbe, len(f.o.Engines))
	var wg sync.WaitGroup
	for i, eng := range f.o.Engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			probes[i] = probeEngine(ctx, eng, name, f.logger)
		}()
	}
	wg.Wait()
	best := -1
	for i, p := range probes {
		if p.err != nil {
			f.logger.Warn("engine left out of placement", zap.String("engine", f.o.Engines[i].Name), zap.Error(p.err))
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
	eng := f.o.Engines[best]
	b, _ = json.Marshal(placement{Engine: eng.Name, Placed: time.Now().UTC()})
	if err := f.o.Storage.Store(ctx, key, b); err != nil {
		return Engine{}, fmt.Errorf("recording the placement of %s: %w", name, err)
	}
	f.logger.Info("placed a sandbox", zap.String("container", name), zap.String("engine", eng.Name),
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
// it holds. logger receives a Kubernetes engine's client-go messages.
func probeEngine(ctx context.Context, eng Engine, name string, logger *zap.Logger) (p engineProbe) {
	cli, err := eng.NewClient(logger)
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

// recentPlacements are the people's containers placed by this process, by name, with
// when: shared across reloads, so that a container placed and not made yet counts
// against max_sandboxes under the next configuration too.
var recentPlacements sync.Map

// placementCounts is how long a placement counts while its container does not exist:
// the first Ensure makes it within that, or failed.
const placementCounts = 2 * time.Minute

// checkMaxSandboxes refuses to place the new sandbox of cfg when max_sandboxes
// people's sandboxes of this site exist already (on the engines, or placed by this
// process moments ago, whatever configuration placed them) with the warm ones. A
// container that exists is no new sandbox, and one that will be a warm one taken adds
// none.
func (f *Fleet) checkMaxSandboxes(ctx context.Context, cfg sandbox.Config) error {
	if f.o.MaxSandboxes <= 0 {
		return nil
	}
	have := f.counted(ctx)
	if have[cfg.Container] {
		return nil
	}
	n := len(have)
	if w := f.o.Warm; w != nil {
		n += w.Count()
		if w.Ready() > 0 && w.Differs(cfg) == "" {
			n-- // takes one: the count stays
		}
	}
	if n >= f.o.MaxSandboxes {
		return fmt.Errorf("this server already keeps %d sandboxes, the most its operator allows (max_sandboxes, warm_sandboxes included); ask the operator to raise max_sandboxes or to delete the sandbox of someone who left", n)
	}
	return nil
}

// counted are the people's sandbox containers of this site that count against
// max_sandboxes, by name: those on the engines and those this process placed moments
// ago.
func (f *Fleet) counted(ctx context.Context) map[string]bool {
	have := map[string]bool{}
	for _, x := range f.Existing(ctx) {
		have[x.Name] = true
	}
	recentPlacements.Range(func(k, v any) bool {
		n := k.(string)
		if strings.HasPrefix(n, f.o.Base.Container+"-") && time.Since(v.(time.Time)) < placementCounts {
			have[n] = true
		}
		return true
	})
	return have
}
