package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// A warm pool keeps warm_sandboxes containers made and started ahead of need on one
// Docker engine, with their agents running: nobody's, on volumes of their own that
// nobody has written to. A person's first call takes one (Fleet.Entry): the container
// is renamed to the person's, and its volume is recorded in storage as the person's
// (VolumePrefix), since Docker can rename a container but not a volume, nor change a
// running container's mounts. A new one is then made in the background. The caller
// pools a WarmPool across configuration reloads; Destruct removes the containers and
// volumes not taken.

// warmInfix separates a site's container or volume name from a warm sandbox's id:
// a person's are <container>-<person>, so no person's name is ever a warm one's.
const warmInfix = "_warm_"

// warmRetry is how long the pool waits after failing to make a warm sandbox, and how
// often it looks again for room under max_sandboxes.
const warmRetry = 10 * time.Second

// warmRefillDelay is how long after a take the pool begins making its replacement.
const warmRefillDelay = 2 * time.Second

// A warm sandbox is made on the processors that people's commands need: creating and
// starting a container takes the engine, its runtime and Caddy a few hundred
// milliseconds of processor time. While commands queue for the host's processors
// (sandbox.AdmissionStats) the pool waits, looking again every warmQuietPoll, for up to
// warmYield: a host busy for longer still gets its warm sandboxes.
const (
	warmYield     = 10 * time.Second
	warmQuietPoll = 100 * time.Millisecond
)

// commandsQueued reports whether commands wait for the host's processors now.
func commandsQueued() bool {
	waiting, _, _ := sandbox.AdmissionStats()
	return waiting > 0
}

// WarmOptions are a warm pool's settings.
type WarmOptions struct {
	// Base is the site's sandbox configuration (the operator's); the warm ones are
	// made with it under names of their own (WarmConfig).
	Base sandbox.Config
	// Engine is the engine they are made on (Config.Engine is its name) and Client a
	// client of it, closed by Destruct.
	Engine Engine
	Client sandbox.API
	// N is how many are kept ready.
	N      int
	Logger *zap.Logger
}

// WarmPool is the warm sandboxes of a site on one engine.
type WarmPool struct {
	o   WarmOptions
	cfg sandbox.Config // Base as the warm ones are made, before WarmConfig names each

	mu     sync.Mutex
	ready  []*sandbox.Sandbox
	making *sandbox.Sandbox // the one being made
	closed bool
	// user is what the fleet that uses the pool (the latest configuration's) lends
	// it: its max_sandboxes check and its storage.
	user atomic.Pointer[warmUser]
	last atomic.Pointer[warmUser] // the latest lent, kept once given back: Destruct drops the lease there

	start sync.Once
	wake  chan struct{}
	// wakeLease has the lease renewed at once (a new storage lent).
	wakeLease chan struct{}
	ctx       context.Context
	cancel    context.CancelFunc
	done      chan struct{}
	taken     atomic.Int64
	// facts are what was found installed in a warm sandbox before it was anyone's, for
	// the image it runs (Facts).
	facts atomic.Pointer[boxapi.Facts]
	// queued reports whether commands queue for the host's processors (waitQuiet).
	queued func() bool
}

// NewWarmPool makes a warm pool. It does no Docker I/O: Start begins to fill it.
func NewWarmPool(o WarmOptions) *WarmPool {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	ctx, cancel := context.WithCancel(context.Background())
	var id [8]byte
	_, _ = rand.Read(id[:])
	// The warm sandboxes' settings: the site's, nobody's; each is named by WarmConfig.
	cfg := o.Base
	cfg.Person, cfg.Warm = "", true
	cfg.Engine, cfg.WarmPool = o.Engine.Name, hex.EncodeToString(id[:])
	return &WarmPool{o: o, cfg: cfg, wake: make(chan struct{}, 1), wakeLease: make(chan struct{}, 1), ctx: ctx, cancel: cancel, done: make(chan struct{}), queued: commandsQueued}
}

// WarmConfig is the configuration of the warm sandbox id of the site whose
// configuration is base: named <container>_warm_<id> on volume <volume>_warm_<id>,
// nobody's.
func WarmConfig(base sandbox.Config, id string) sandbox.Config {
	cfg := base
	cfg.Container += warmInfix + id
	cfg.Volume += warmInfix + id
	cfg.Person, cfg.Warm = "", true
	return cfg
}

// isWarmName reports whether name is the name of one of base's warm containers or
// volumes (base the site's container or volume name).
func isWarmName(base, name string) bool {
	id, ok := strings.CutPrefix(name, base+warmInfix)
	return ok && id != ""
}

// Start begins to fill the pool and keep its lease in the background, once;
// Destruct ends both.
func (p *WarmPool) Start() {
	p.start.Do(func() {
		var wg sync.WaitGroup
		wg.Go(p.fill)
		wg.Go(p.keepLease)
		go func() {
			wg.Wait()
			close(p.done)
		}()
	})
}

// Ready is how many warm sandboxes are ready to be taken.
func (p *WarmPool) Ready() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready)
}

// Count is how many warm sandboxes exist or are being made: what counts against
// max_sandboxes.
func (p *WarmPool) Count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.ready)
	if p.making != nil {
		n++
	}
	return n
}

// Taken is how many warm sandboxes people have taken from the pool.
func (p *WarmPool) Taken() int64 { return p.taken.Load() }

// Warm is the fleet's warm sandboxes; nil when it keeps none.
func (f *Fleet) Warm() *WarmPool { return f.o.Warm }

// Engine is the engine the pool's sandboxes are on.
func (p *WarmPool) Engine() Engine { return p.o.Engine }

// Differs names the settings in which cfg, a person's sandbox configuration, differs
// from the warm sandboxes' ("" when none): such a person's sandbox is made afresh.
func (p *WarmPool) Differs(cfg sandbox.Config) string {
	w := p.cfg
	var d []string
	add := func(differs bool, name string) {
		if differs {
			d = append(d, name)
		}
	}
	add(cfg.Image != w.Image, "image")
	add(cfg.Memory != w.Memory, "memory")
	add(cfg.CPUs != w.CPUs, "cpus")
	add(cfg.PidsLimit != w.PidsLimit, "pids_limit")
	add(cfg.Runtime != w.Runtime, "runtime")
	add(cfg.KeepProcesses != w.KeepProcesses, "keep_processes")
	add(cfg.Engine != w.Engine, "engine")
	// Everything else is the site's: any other difference is named as a whole.
	a, b := cfg, w
	a.Container, a.Volume, a.Person, a.Warm, a.WarmPool = "", "", "", false, ""
	b.Container, b.Volume, b.Person, b.Warm, b.WarmPool = "", "", "", false, ""
	a.Image, a.Memory, a.CPUs, a.PidsLimit, a.Runtime, a.KeepProcesses, a.Engine = b.Image, b.Memory, b.CPUs, b.PidsLimit, b.Runtime, b.KeepProcesses, b.Engine
	add(a != b, "other sandbox settings")
	return strings.Join(d, ", ")
}

// take hands out a ready warm sandbox, nil when none is, and has another made.
func (p *WarmPool) take() *sandbox.Sandbox {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.ready) == 0 {
		return nil
	}
	w := p.ready[0]
	p.ready = p.ready[1:]
	p.taken.Add(1)
	// The next one is made shortly after: making it at once would take the CPU from
	// the first call of the person who took this one.
	time.AfterFunc(warmRefillDelay, p.kick)
	return w
}

// discard removes a warm sandbox that could not be taken, in the background.
func (p *WarmPool) discard(w *sandbox.Sandbox) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := w.Discard(ctx); err != nil {
			p.o.Logger.Warn("removing a warm sandbox that could not be taken", zap.String("container", w.Config().Container), zap.Error(err))
		}
	}()
}

// kick wakes the loop that fills the pool.
func (p *WarmPool) kick() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// warmUser is what a fleet lends the pool it uses.
type warmUser struct {
	room    func(context.Context) bool // whether max_sandboxes leaves room for one more
	storage Storage                    // the configuration's storage (the lease's); nil for none
}

// use makes room the pool's check of max_sandboxes and storage the one its lease is
// kept in (the configuration's: a reload's new storage, the old one being cleaned up);
// it returns the function that undoes it while it is still the one set.
func (p *WarmPool) use(room func(context.Context) bool, storage Storage) (undo func()) {
	u := &warmUser{room: room, storage: storage}
	p.user.Store(u)
	p.last.Store(u)
	p.kick()
	select {
	case p.wakeLease <- struct{}{}: // the lease goes to this storage at once
	default:
	}
	return func() { p.user.CompareAndSwap(u, nil) }
}

func (p *WarmPool) hasRoom(ctx context.Context) bool {
	u := p.user.Load()
	return u == nil || u.room == nil || u.room(ctx)
}

// storage is where the pool's lease is kept now; nil while no fleet lends one.
func (p *WarmPool) storage() Storage {
	if u := p.user.Load(); u != nil {
		return u.storage
	}
	return nil
}

// fill keeps N warm sandboxes ready, making one at a time, until Destruct.
func (p *WarmPool) fill() {
	defer func() {
		if v := recover(); v != nil {
			p.o.Logger.Error("panic while making warm sandboxes", zap.Any("panic", v))
		}
	}()
	t := time.NewTicker(warmRetry)
	defer t.Stop()
	var swept time.Time
	for {
		if now := time.Now(); now.Sub(swept) >= warmSweepEvery {
			p.sweep(p.ctx)
			swept = now
		}
		if p.Ready() < p.o.N && p.hasRoom(p.ctx) {
			p.waitQuiet()
			if err := p.makeOne(); err != nil && p.ctx.Err() == nil {
				p.o.Logger.Warn("making a warm sandbox; trying again shortly", zap.Duration("in", warmRetry), zap.Error(err))
			} else if err == nil {
				continue
			}
		}
		select {
		case <-p.ctx.Done():
			return
		case <-p.wake:
		case <-t.C:
		}
	}
}

// waitQuiet returns once no command queues for the host's processors, after
// warmYield, or at Destruct.
func (p *WarmPool) waitQuiet() {
	deadline := time.Now().Add(warmYield)
	for p.queued() && time.Now().Before(deadline) {
		select {
		case <-p.ctx.Done():
			return
		case <-time.After(warmQuietPoll):
		}
	}
}

// makeOne makes a warm sandbox, starts it and its agent, and adds it to the ready.
func (p *WarmPool) makeOne() error {
	var id [6]byte
	_, _ = rand.Read(id[:])
	w, err := sandbox.New(p.o.Client, WarmConfig(p.cfg, hex.EncodeToString(id[:])), p.o.Logger.Named("sandbox"))
	if err != nil {
		return err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.making = w
	p.mu.Unlock()
	begin := time.Now()
	err = w.Warm(p.ctx)
	if err == nil {
		p.detect(w)
	}
	p.mu.Lock()
	p.making = nil
	closed := p.closed
	if err == nil && !closed {
		p.ready = append(p.ready, w)
	}
	p.mu.Unlock()
	if err != nil || closed {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if derr := w.Discard(ctx); derr != nil {
			p.o.Logger.Warn("removing a warm sandbox", zap.String("container", w.Config().Container), zap.Error(derr))
		}
		return err
	}
	p.o.Logger.Debug("made a warm sandbox", zap.String("container", w.Config().Container), zap.Duration("took", time.Since(begin)))
	return nil
}

// detect looks at what is installed in w, a warm sandbox nobody has used, once per
// image: whoever takes a warm sandbox, or has a sandbox of the same image, is then
// told without a detection of their own (Facts). Done before w is ready, so nothing a
// person runs is there yet.
func (p *WarmPool) detect(w *sandbox.Sandbox) {
	ctx, cancel := context.WithTimeout(p.ctx, time.Minute)
	defer cancel()
	if f := p.facts.Load(); f != nil {
		if id, err := w.ImageID(ctx); err == nil && id == f.ImageID {
			return
		}
	}
	f, err := w.Detect(ctx)
	if err != nil {
		p.o.Logger.Debug("detecting the tools of a warm sandbox", zap.String("container", w.Config().Container), zap.Error(err))
		return
	}
	p.facts.Store(&f)
}

// Facts returns what was found installed in a warm sandbox of image imageID before it
// was anyone's, nil when none was looked at (or p is nil).
func (p *WarmPool) Facts(imageID string) *boxapi.Facts {
	if p == nil {
		return nil
	}
	if f := p.facts.Load(); f != nil && f.ImageID == imageID {
		return f
	}
	return nil
}

// Destruct stops filling the pool, removes the warm sandboxes nobody took (their
// containers and volumes) and closes the engine's client. The caller's pool calls it
// when the last configuration with the pool's settings has let go.
func (p *WarmPool) Destruct() error {
	p.mu.Lock()
	p.closed = true
	making := p.making
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	p.cancel()
	if making != nil {
		making.Close() // the make under way ends, and removes what it made
	}
	p.start.Do(func() { close(p.done) })
	<-p.done
	p.dropLease()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, w := range ready {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Discard(ctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(ready) > 0 {
		p.o.Logger.Info("removed the warm sandboxes nobody took", zap.Int("removed", len(ready)-len(errs)), zap.Errors("errors", errs))
	}
	if p.o.Client != nil {
		if err := p.o.Client.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("removing warm sandboxes: %w", errs[0])
	}
	return nil
}

// VolumePrefix is where storage records the volume of a person's sandbox that is not
// <volume>-<person>, the one of a warm sandbox the person took:
// <prefix><container>, a JSON object with the volume's and the person's names.
const VolumePrefix = "mcp_sandbox/volume/"

// volumeRecord is what storage records of a taken warm sandbox's volume.
type volumeRecord struct {
	Volume string    `json:"volume"`
	Person string    `json:"person"`
	Taken  time.Time `json:"taken"`
}

// recordedVolume is the volume storage records for person's container (""
// for none), remembered for the life of the fleet.
func (f *Fleet) recordedVolume(ctx context.Context, person, container string) (string, error) {
	f.mu.Lock()
	v, ok := f.volumes[person]
	f.mu.Unlock()
	if ok || f.o.Storage == nil || f.kubernetes() {
		return v, nil
	}
	v, err := f.loadVolume(ctx, container)
	if err != nil {
		return "", err
	}
	f.noteVolume(person, v)
	return v, nil
}

// kubernetes reports whether the fleet's engine is a Kubernetes one (no records,
// no warm sandboxes).
func (f *Fleet) kubernetes() bool {
	_, ok := Kubernetes(f.o.Engines)
	return ok
}

func (f *Fleet) noteVolume(person, volume string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.volumes == nil {
		f.volumes = map[string]string{}
	}
	f.volumes[person] = volume
}

// loadVolume reads the volume record of container from storage ("" for none).
func (f *Fleet) loadVolume(ctx context.Context, container string) (string, error) {
	b, err := f.o.Storage.Load(ctx, VolumePrefix+container)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the volume record of %s: %w", container, err)
	}
	var r volumeRecord
	if err := json.Unmarshal(b, &r); err != nil || r.Volume == "" {
		return "", fmt.Errorf("reading the volume record of %s (storage key %s%s): not a volume record: %v", container, VolumePrefix, container, err)
	}
	return r.Volume, nil
}

func (f *Fleet) storeVolume(ctx context.Context, person, container, volume string) error {
	b, _ := json.Marshal(volumeRecord{Volume: volume, Person: person, Taken: time.Now().UTC()})
	if err := f.o.Storage.Store(ctx, VolumePrefix+container, b); err != nil {
		return fmt.Errorf("recording the volume %s of %s: %w", volume, container, err)
	}
	f.noteVolume(person, volume)
	return nil
}

// settle finds the volume of person's sandbox the first time the fleet places it,
// under a storage lock that instances sharing the storage share: the one recorded,
// else that of a container of theirs made from a warm sandbox (recorded then), else
// <volume>-<person>. A new person (no container, no volume) whose settings are the
// warm sandboxes' takes one when it is on eng: it returns the person's entry then,
// with its release, and nil for everyone else.
func (f *Fleet) settle(ctx context.Context, person string, cfg *sandbox.Config, eng Engine) (e *Entry, release func() error, err error) {
	if f.o.Storage == nil || f.kubernetes() {
		return nil, nil, nil
	}
	key := VolumePrefix + cfg.Container
	if err := f.o.Storage.Lock(ctx, key); err != nil {
		return nil, nil, fmt.Errorf("locking the volume record of %s: %w", cfg.Container, err)
	}
	defer func() {
		if err := f.o.Storage.Unlock(context.WithoutCancel(ctx), key); err != nil {
			f.logger.Warn("unlocking a volume record", zap.String("container", cfg.Container), zap.Error(err))
		}
	}()
	v, err := f.loadVolume(ctx, cfg.Container)
	if err != nil {
		return nil, nil, err
	}
	if v != "" {
		cfg.Volume = v
		f.noteVolume(person, v)
		return nil, nil, nil
	}
	cli, done, err := f.engineClient(eng)
	if err != nil {
		return nil, nil, err
	}
	defer done()
	c, exists, err := sandbox.Inspect(ctx, cli, cfg.Container)
	if err != nil {
		return nil, nil, err
	}
	if exists {
		if c.Warm && isWarmName(f.o.Base.Volume, c.Volume) {
			// Taken before its volume was recorded (the process ended between the two).
			cfg.Volume = c.Volume
			return nil, nil, f.storeVolume(ctx, person, cfg.Container, c.Volume)
		}
		f.noteVolume(person, "")
		return nil, nil, nil
	}
	f.noteVolume(person, "")
	p := f.o.Warm
	if p == nil {
		return nil, nil, nil
	}
	slow := func(why string, fields ...zap.Field) (*Entry, func() error, error) {
		f.logger.Info("making a person's sandbox afresh, not from a warm one: "+why,
			append(fields, zap.String("person", person), zap.String("container", cfg.Container))...)
		return nil, nil, nil
	}
	if eng.Name != p.Engine().Name {
		return slow("it is placed on another engine than the warm sandboxes'", zap.String("engine", eng.Name), zap.String("warm_engine", p.Engine().Name))
	}
	if why := p.Differs(*cfg); why != "" {
		return slow("the person's settings differ from the site's", zap.String("differ", why))
	}
	if had, err := sandbox.VolumeExists(ctx, cli, cfg.Volume); err != nil || had {
		if err != nil {
			return nil, nil, err
		}
		return slow("the person has a volume already, which their sandbox keeps", zap.String("volume", cfg.Volume))
	}
	w := p.take()
	if w == nil {
		return slow("no warm sandbox is ready", zap.Int("warm_sandboxes", p.o.N))
	}
	begin := time.Now()
	taken := *cfg
	taken.Volume = w.Config().Volume
	e, release, err = f.o.Acquire(eng, taken)
	if err == nil {
		if err = e.sb.TakeOver(ctx, w); err != nil {
			err = errors.Join(err, release())
		}
	}
	if err != nil {
		p.discard(w)
		return slow("the warm sandbox could not be taken", zap.Error(err))
	}
	if err := f.storeVolume(ctx, person, cfg.Container, taken.Volume); err != nil {
		// The container's labels still name its volume: the next placement records it.
		f.logger.Warn("recording the volume of a taken warm sandbox", zap.String("person", person), zap.Error(err))
		f.noteVolume(person, taken.Volume)
	}
	*cfg = taken
	if f.o.WarmTaken != nil {
		f.o.WarmTaken()
	}
	f.logger.Info("a person took a warm sandbox", zap.String("person", person), zap.String("container", cfg.Container),
		zap.String("volume", cfg.Volume), zap.String("warm", w.Config().Container), zap.Duration("took", time.Since(begin)))
	return e, release, nil
}

// warmRoom reports whether max_sandboxes leaves room for another warm sandbox.
func (f *Fleet) warmRoom(ctx context.Context) bool {
	if f.o.MaxSandboxes <= 0 || f.o.Warm == nil {
		return true
	}
	return len(f.counted(ctx))+f.o.Warm.Count() < f.o.MaxSandboxes
}

// forgetVolume drops the volume record of a deleted sandbox container.
func (f *Fleet) forgetVolume(ctx context.Context, person, container string) {
	f.mu.Lock()
	delete(f.volumes, person)
	f.mu.Unlock()
	if f.o.Storage == nil {
		return
	}
	if err := f.o.Storage.Delete(ctx, VolumePrefix+container); err != nil && !errors.Is(err, fs.ErrNotExist) {
		f.logger.Warn("forgetting the volume of a deleted sandbox", zap.String("container", container), zap.Error(err))
	}
}
