package fleet

import (
	"context"
	"encoding/json"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
)

// TestWarmLeaseGone: a pool's lease tells a live process from one that ended: at once
// on this host in this pid namespace (a pid that no longer runs, or that runs another
// process since), else by its renewal.
func TestWarmLeaseGone(t *testing.T) {
	if thisProcess.Start == "" || thisProcess.PIDNS == "" || thisProcess.Boot == "" {
		t.Skip("no /proc here")
	}
	now := time.Now()
	me := thisProcess
	old := now.Add(-time.Hour)

	alive := thisProcess
	alive.Renewed = old
	if alive.gone(me, now) {
		t.Error("this process's own lease, not renewed for an hour, is taken for gone")
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	ended := thisProcess
	ended.PID, ended.Start, ended.Renewed = cmd.Process.Pid, "12345", now
	if !ended.gone(me, now) {
		t.Error("the fresh lease of an ended process on this host is taken for live")
	}
	reused := thisProcess
	reused.Start, reused.Renewed = thisProcess.Start+"0", now
	if !reused.gone(me, now) {
		t.Error("a lease whose pid runs another process (another start time) is taken for live")
	}
	for name, l := range map[string]warmLease{
		"another host":           {Host: me.Host + "-other", Boot: me.Boot, PID: me.PID, PIDNS: me.PIDNS, Start: "1"},
		"another boot":           {Host: me.Host, Boot: "another-boot", PID: me.PID, PIDNS: me.PIDNS, Start: "1"},
		"another pid namespace":  {Host: me.Host, Boot: me.Boot, PID: me.PID, PIDNS: "pid:[1]", Start: "1"},
		"no process start known": {Host: me.Host, Boot: me.Boot, PID: me.PID, PIDNS: me.PIDNS},
	} {
		l.Renewed = now.Add(-time.Minute)
		if l.gone(me, now) {
			t.Errorf("%s: a lease renewed a minute ago is taken for gone", name)
		}
		l.Renewed = now.Add(-warmLeaseStale - time.Second)
		if !l.gone(me, now) {
			t.Errorf("%s: a lease not renewed for %v is taken for live", name, warmLeaseStale)
		}
	}
}

// TestWarmPoolGone: a pool with no lease in storage, or with something else at its
// key, is gone; a live pool's lease is found; a storage that cannot be read leaves
// every warm sandbox alone.
func TestWarmPoolGone(t *testing.T) {
	ctx := context.Background()
	st := &certmagic.FileStorage{Path: t.TempDir()}
	live := NewWarmPool(WarmOptions{Base: testBase("sb"), N: 1})
	live.use(nil, st)
	live.renewLease()
	p := NewWarmPool(WarmOptions{Base: testBase("sb"), N: 1})
	now := time.Now()
	if p.poolGone(ctx, st, live.ID(), now) {
		t.Error("a live pool is taken for gone")
	}
	if !p.poolGone(ctx, st, "0123456789abcdef", now) {
		t.Error("a pool with no lease is taken for live")
	}
	if p.poolGone(ctx, st, "", now) {
		t.Error("a warm sandbox with no pool's id (made by an earlier version, whose process may run) is taken for gone")
	}
	stale := thisProcess
	stale.Host, stale.Renewed = "elsewhere", now.Add(-time.Hour)
	b, _ := json.Marshal(stale)
	if err := st.Store(ctx, WarmLeasePrefix+"00000000000000aa", b); err != nil {
		t.Fatal(err)
	}
	if err := st.Store(ctx, WarmLeasePrefix+"00000000000000bb", []byte("not a lease")); err != nil {
		t.Fatal(err)
	}
	if err := st.Store(ctx, WarmLeasePrefix+"00000000000000aa.tmp1", []byte("being written")); err != nil {
		t.Fatal(err)
	}
	if !p.poolGone(ctx, st, "00000000000000bb", now) {
		t.Error("a pool whose lease is no lease is taken for live")
	}
	// The leases of pools gone are removed; the live one's and what is not a lease stay.
	p.dropGoneLeases(ctx, st, now)
	keys, err := st.List(ctx, strings.TrimSuffix(WarmLeasePrefix, "/"), false)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	if want := []string{WarmLeasePrefix + "00000000000000aa.tmp1", WarmLeasePrefix + live.ID()}; !slices.Equal(keys, want) {
		t.Errorf("leases after dropping those gone: %v, want %v", keys, want)
	}
	// A pool given back by its last configuration drops its lease there.
	live.use(nil, st)()
	live.dropLease()
	if !p.poolGone(ctx, st, live.ID(), now) {
		t.Error("a pool whose lease was dropped is taken for live")
	}
	if p.poolGone(ctx, &failingStorage{}, live.ID(), now) {
		t.Error("a pool whose lease storage cannot read is taken for gone")
	}
}

// TestProcStart: the start time of a process is read past a command name that holds
// spaces and parentheses.
func TestProcStart(t *testing.T) {
	if thisProcess.Start == "" {
		t.Skip("no /proc here")
	}
	if _, err := strconv.ParseUint(thisProcess.Start, 10, 64); err != nil {
		t.Errorf("this process's start time %q", thisProcess.Start)
	}
	tail := " S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 424242 19 20"
	if got := statStart("77 (a b) c) d)" + tail); got != "424242" {
		t.Errorf("the start time after a command name with spaces and parentheses: %q", got)
	}
	for _, bad := range []string{"", "77 (sh", "77 (sh) S 1 2"} {
		if got := statStart(bad); got != "" {
			t.Errorf("statStart(%q) = %q", bad, got)
		}
	}
	if got := procStart(1 << 30); got != "" {
		t.Errorf("the start time of a pid that cannot run: %q", got)
	}
}
