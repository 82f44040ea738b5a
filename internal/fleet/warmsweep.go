package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// A process that ends without its Destruct (killed, or the machine lost) leaves its
// warm sandboxes running: nobody's, holding memory and counting against nothing. Each
// pool therefore keeps a lease in storage, at WarmLeasePrefix<pool id>, naming the
// process that holds it (host, pid, and the process's start time) and renewed every
// warmLeaseRenew; its warm containers carry the pool's id (label
// mcp-sandbox.warm-pool). Every warmSweepEvery each pool looks at the warm
// containers of its site on its engine that another pool made, and removes those whose
// pool is gone: no lease, a lease of a process on this host that no longer runs (known
// at once), or a lease not renewed for warmLeaseStale (another host's). Processes that
// share the engine share the storage (they serve the same site), so a live pool's
// lease is always found. A warm container is removed with its volume, which nobody has
// written to: a container still under its warm name was never taken (a take renames
// it before its volume is recorded as the person's).

// WarmLeasePrefix is where storage holds the leases of live warm pools.
const WarmLeasePrefix = "mcp_sandbox/warm/"

const (
	warmLeaseRenew = 30 * time.Second
	warmLeaseStale = 3 * time.Minute
	warmSweepEvery = time.Minute
)

// warmLease is a pool's lease: the process that holds it.
type warmLease struct {
	Host    string    `json:"host"`
	Boot    string    `json:"boot,omitempty"` // the kernel's boot id (Linux): one machine, one boot
	PID     int       `json:"pid"`
	PIDNS   string    `json:"pidns,omitempty"` // its pid namespace (Linux), where pid means that process
	Start   string    `json:"start,omitempty"` // the process's start time (Linux: /proc/<pid>/stat's starttime)
	Renewed time.Time `json:"renewed"`
}

// thisProcess is the lease of the running process, Renewed aside.
var thisProcess = func() warmLease {
	host, _ := os.Hostname()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	ns, _ := os.Readlink("/proc/self/ns/pid")
	return warmLease{Host: host, Boot: strings.TrimSpace(string(boot)), PID: os.Getpid(), PIDNS: ns, Start: procStart(os.Getpid())}
}()

// procStart is the start time of process pid as the kernel counts it (clock ticks
// after boot), "" when it is not known (no such process, or no /proc).
func procStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	return statStart(string(b))
}

// statStart is the starttime field of a /proc/<pid>/stat line, "" when it has none.
func statStart(b string) string {
	// The command name, in parentheses, may hold spaces: fields count after its end.
	i := strings.LastIndexByte(b, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(b[i+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19] // field 22 of stat: starttime
}

// gone reports whether the process that holds l has ended, as far as a process whose
// own lease is me can tell at now. On the same machine, boot and pid namespace (host
// names alone are shared by cloned machines and by containers given one), at once:
// its pid runs no process, or one that started at another time. Else, and when the
// process cannot be looked at (a /proc that hides other users' processes), when the
// lease has not been renewed for warmLeaseStale.
func (l warmLease) gone(me warmLease, now time.Time) bool {
	if l.Host == me.Host && l.Boot != "" && l.Boot == me.Boot && l.PIDNS != "" && l.PIDNS == me.PIDNS && l.PID > 0 && l.Start != "" {
		if processGone(l.PID) {
			return true
		}
		switch start := procStart(l.PID); {
		case start == l.Start:
			return false
		case start != "":
			return true // the pid is another process's now
		}
	}
	return now.Sub(l.Renewed) > warmLeaseStale
}

// isID reports whether s is named like a pool's or an instance's id (16 hex digits;
// a storage's temporary files sit beside the records while one is written).
func isID(s string) bool {
	if len(s) != 16 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ID is the pool's id, the one its warm containers carry.
func (p *WarmPool) ID() string { return p.cfg.WarmPool }

// renewLease writes the pool's lease to storage.
func (p *WarmPool) renewLease() {
	st := p.storage()
	if st == nil {
		return
	}
	l := thisProcess
	l.Renewed = time.Now().UTC()
	b, _ := json.Marshal(l)
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	if err := st.Store(ctx, WarmLeasePrefix+p.ID(), b); err != nil && p.ctx.Err() == nil {
		p.o.Logger.Warn("renewing the warm sandboxes' lease in storage; another Caddy sharing the engine may take this one's warm sandboxes for leftovers",
			zap.String("key", WarmLeasePrefix+p.ID()), zap.Error(err))
	}
}

// keepLease renews the pool's lease every warmLeaseRenew until Destruct, apart from
// the making of warm sandboxes, which may take longer than that.
func (p *WarmPool) keepLease() {
	t := time.NewTicker(warmLeaseRenew)
	defer t.Stop()
	for {
		p.renewLease()
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		case <-p.wakeLease:
		}
	}
}

// dropLease removes the pool's lease (its warm sandboxes are removed), from the
// storage of the last configuration that used the pool. Another process may find a
// lease that could not be removed: it names no container any more, and the next
// sweep of a pool that sees it gone removes it.
func (p *WarmPool) dropLease() {
	u := p.last.Load()
	if u == nil || u.storage == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := u.storage.Delete(ctx, WarmLeasePrefix+p.ID()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		p.o.Logger.Debug("removing the warm sandboxes' lease from storage", zap.String("key", WarmLeasePrefix+p.ID()), zap.Error(err))
	}
}

// poolGone reports whether the pool id is gone (see gone); a lease that storage
// cannot read is taken for a live one.
func (p *WarmPool) poolGone(ctx context.Context, st Storage, id string, now time.Time) bool {
	if id == "" {
		// Made by a version before pools had ids: its process may still run (instances
		// upgraded one by one), so it is left alone; docs/operations.md says how to
		// remove such leftovers by hand.
		return false
	}
	b, err := st.Load(ctx, WarmLeasePrefix+id)
	if errors.Is(err, fs.ErrNotExist) {
		return true
	}
	if err != nil {
		p.o.Logger.Warn("reading a warm sandboxes' lease", zap.String("key", WarmLeasePrefix+id), zap.Error(err))
		return false
	}
	var l warmLease
	if err := json.Unmarshal(b, &l); err != nil {
		return true // not a lease: nothing renews it
	}
	return l.gone(thisProcess, now)
}

// sweep removes the warm containers (and their volumes) of the site on the pool's
// engine that pools now gone made. It reports how many it removed.
func (p *WarmPool) sweep(ctx context.Context) int {
	st := p.storage()
	if st == nil || p.o.Client == nil {
		return 0
	}
	lctx, cancel := context.WithTimeout(ctx, engineProbeTimeout)
	list, err := sandbox.Containers(lctx, p.o.Client)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			p.o.Logger.Warn("looking for warm sandboxes left behind", zap.Error(err))
		}
		return 0
	}
	now := time.Now()
	gone := map[string]bool{}
	removed := 0
	var errs []error
	for _, c := range list {
		if !c.Warm || c.WarmPool == p.ID() || !isWarmName(p.o.Base.Container, c.Name) {
			continue
		}
		g, seen := gone[c.WarmPool]
		if !seen {
			g = p.poolGone(ctx, st, c.WarmPool, now)
			gone[c.WarmPool] = g
		}
		if !g {
			continue
		}
		cfg := WarmConfig(p.cfg, "")
		cfg.Container, cfg.Volume, cfg.WarmPool = c.Name, c.Volume, c.WarmPool
		if !isWarmName(p.o.Base.Volume, c.Volume) {
			cfg.Volume = "" // not a warm volume (labels changed by hand): the container only
		}
		if err := p.discardLeft(ctx, cfg); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	if removed > 0 || len(errs) > 0 {
		p.o.Logger.Info("removed warm sandboxes a Caddy left behind when it ended without removing them",
			zap.Int("removed", removed), zap.Errors("errors", errs))
	}
	p.dropGoneLeases(ctx, st, now)
	return removed
}

// dropGoneLeases removes from storage the leases of pools that are gone (their
// process was killed, or could not remove its lease): nothing renews them.
func (p *WarmPool) dropGoneLeases(ctx context.Context, st Storage, now time.Time) {
	keys, err := st.List(ctx, strings.TrimSuffix(WarmLeasePrefix, "/"), false)
	if err != nil {
		return // a listing cut short is no listing; the next sweep tries again
	}
	for _, k := range keys {
		id := path.Base(k)
		if id == p.ID() || !isID(id) || !p.poolGone(ctx, st, id, now) {
			continue
		}
		if err := st.Delete(ctx, k); err != nil && !errors.Is(err, fs.ErrNotExist) {
			p.o.Logger.Debug("removing the lease of warm sandboxes gone", zap.String("key", k), zap.Error(err))
		}
	}
}

// discardLeft removes the warm container of cfg and, when cfg names one, its volume.
func (p *WarmPool) discardLeft(ctx context.Context, cfg sandbox.Config) error {
	volume := cfg.Volume != ""
	if !volume {
		cfg.Volume = cfg.Container // a name the configuration needs; never removed
	}
	w, err := sandbox.New(p.o.Client, cfg, p.o.Logger.Named("sandbox"))
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if volume {
		return w.Discard(dctx)
	}
	defer w.Close()
	return w.Delete(dctx, false)
}
