package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// teamSize is how many people a team benchmark's Caddyfile names, and teamWarm its
// warm_sandboxes.
const (
	teamSize = 50
	teamWarm = 3
)

// team is one Caddy process, run from the binary the tests build, with teamSize
// person lines, and what a benchmark needs to reach it and its engine.
type team struct {
	*instance
	site   *testsite.Site
	people []string
	keys   map[string]string // person → API key, used as bearer
	// as is, per person, the instance with that person's own HTTP client: a real
	// client keeps its connection from one call to the next.
	as map[string]*instance
	// profiles is MCP_SANDBOX_BENCH_PROFILE, the directory profiles go to ("": none
	// are taken), and admin the address of Caddy's admin endpoint then.
	profiles, admin string
	bin             string // the Caddy binary
}

// startTeam starts a Caddy process whose site names teamSize people, with directives
// added to its mcp_sandbox block. The people's containers and volumes go at the end.
func startTeam(b *testing.B, directives ...string) *team {
	b.Helper()
	bin := caddyBinary(b)
	site := testsite.New(b)
	tm := &team{site: site, keys: map[string]string{}, as: map[string]*instance{}, bin: bin}
	lines := append([]string(nil), directives...)
	for i := range teamSize {
		name := fmt.Sprintf("t%02d", i)
		tm.people = append(tm.people, name)
		tm.keys[name] = name + "-key-" + testenv.RandomHex(16)
		lines = append(lines, "person "+name+" "+tm.keys[name])
	}
	b.Cleanup(func() {
		// Runs once the process is stopped (cleanups run last first).
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for _, name := range tm.people {
			_ = site.Docker.ContainerRemove(ctx, site.Container+"-"+name, container.RemoveOptions{Force: true})
			_ = site.Docker.VolumeRemove(ctx, site.Volume+"-"+name, true)
		}
		// A person who took a warm sandbox has its volume.
		if vols, err := site.Docker.VolumeList(ctx, volume.ListOptions{}); err == nil {
			for _, v := range vols.Volumes {
				if strings.HasPrefix(v.Name, site.Volume+"_warm_") {
					_ = site.Docker.VolumeRemove(ctx, v.Name, true)
				}
			}
		}
	})
	dir := b.TempDir()
	caddyfile := site.Caddyfile(testsite.Options{
		Directive: lines, Site: []string{testsite.MetricsRoute}, Log: filepath.Join(dir, "caddy.log"),
	})
	if tm.profiles = os.Getenv("MCP_SANDBOX_BENCH_PROFILE"); tm.profiles != "" {
		// Caddy's admin endpoint serves Go's profiles on /debug/pprof.
		tm.admin = fmt.Sprintf("127.0.0.1:%d", testsite.FreePort(b))
		caddyfile = strings.Replace(caddyfile, "admin off", "admin "+tm.admin, 1)
	}
	tm.instance = startInstance(b, bin, dir, "caddy", site.Port, caddyfile)
	for _, p := range tm.people {
		in := *tm.instance
		in.http = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 2 * time.Minute}
		tm.as[p] = &in
		b.Cleanup(in.http.CloseIdleConnections)
	}
	return tm
}

// profile saves Caddy's CPU profile of the next seconds, and its goroutines halfway
// through, under MCP_SANDBOX_BENCH_PROFILE as name.cpu.pprof and name.goroutines.txt,
// when that is set; it returns at once and done is closed once both are saved.
func (tm *team) profile(b *testing.B, name string, seconds int) (done <-chan struct{}) {
	ch := make(chan struct{})
	if tm.profiles == "" {
		close(ch)
		return ch
	}
	save := func(path, file string) {
		resp, err := tm.http.Get("http://" + tm.admin + path)
		if err != nil {
			b.Errorf("profile %s: %v", path, err)
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(filepath.Join(tm.profiles, file))
		if err == nil {
			_, err = io.Copy(f, resp.Body)
			f.Close()
		}
		if err != nil {
			b.Errorf("saving %s: %v", file, err)
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { save(fmt.Sprintf("/debug/pprof/profile?seconds=%d", seconds), name+".cpu.pprof") })
	wg.Go(func() {
		time.Sleep(time.Duration(seconds) * time.Second / 2)
		save("/debug/pprof/goroutine?debug=1", name+".goroutines.txt")
	})
	go func() { wg.Wait(); close(ch) }()
	return ch
}

// awaitWarm waits until Caddy's metrics show n warm sandboxes ready.
func (tm *team) awaitWarm(b *testing.B, n int) {
	testenv.WaitFor(b, 2*time.Minute, "warm sandboxes ready", func() bool {
		v, _ := testsite.MetricSum(testsite.Metrics(b, tm.http, tm.url), "caddy_mcp_sandbox_warm_sandboxes", nil)
		return int(v) == n
	})
}

// call runs command through person's execute and returns how long it took.
func (tm *team) call(ctx context.Context, b *testing.B, person, command string) time.Duration {
	t0 := time.Now()
	st, err := tm.as[person].execute(ctx, tm.keys[person], command, 30)
	took := time.Since(t0)
	if err != nil || st["exit_code"] != 0.0 {
		b.Errorf("%s: execute %q: %v %v", person, command, st, err)
	}
	return took
}

// callTrue is call with `true`, in the form everyone takes.
func (tm *team) callTrue(ctx context.Context, b *testing.B) func(person string) time.Duration {
	return func(p string) time.Duration { return tm.call(ctx, b, p, "true") }
}

// arrive makes people's first calls, five at a time.
func (tm *team) arrive(ctx context.Context, b *testing.B, people []string) {
	for i := 0; i < len(people); i += 5 {
		everyone(people[i:min(i+5, len(people))], tm.callTrue(ctx, b))
	}
}

// everyone runs f for each person at once and returns each one's duration, sorted.
func everyone(people []string, f func(person string) time.Duration) []time.Duration {
	took := make([]time.Duration, len(people))
	var wg sync.WaitGroup
	for i, p := range people {
		wg.Go(func() { took[i] = f(p) })
	}
	wg.Wait()
	slices.Sort(took)
	return took
}

// quantile is the q quantile of sorted durations, in milliseconds.
func quantile(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := min(len(sorted)-1, int(q*float64(len(sorted))))
	return float64(sorted[i].Microseconds()) / 1000
}

// procRSS is the resident memory of process pid, in KiB.
func procRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	_, rest, ok := strings.Cut(string(b), "VmRSS:")
	f := strings.Fields(rest)
	if !ok || len(f) == 0 {
		return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	}
	return strconv.ParseInt(f[0], 10, 64)
}

// procCPU is the CPU time processes whose command line contains one of names have
// used (user and system), summed over those running now.
func procCPU(names ...string) time.Duration {
	ents, _ := os.ReadDir("/proc")
	var ticks int64
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !slices.ContainsFunc(names, func(n string) bool { return strings.Contains(string(cmd), n) }) {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// After the command's name in parentheses: state is field 3, utime 14, stime 15.
		_, rest, _ := strings.Cut(string(stat), ") ")
		f := strings.Fields(rest)
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += u + s
	}
	return time.Duration(ticks) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

// cgroupFigures is what the control groups of containers have used: CPU time, the
// system part of it, and page faults.
type cgroupFigures struct {
	cpu, sys time.Duration
	faults   int64
}

// containersCPU is what the containers with ids have used, from their control groups
// (v1: cpuacct and memory; v2: cpu.stat and memory.stat); false when neither can be
// read.
func containersCPU(ids []string) (cgroupFigures, bool) {
	var total cgroupFigures
	field := func(b []byte, name string) int64 {
		_, rest, _ := strings.Cut("\n"+string(b), "\n"+name+" ")
		v, _ := strconv.ParseInt(strings.Fields(rest + " 0")[0], 10, 64)
		return v
	}
	for _, id := range ids {
		if b, err := os.ReadFile("/sys/fs/cgroup/cpuacct/docker/" + id + "/cpuacct.usage"); err == nil {
			ns, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			total.cpu += time.Duration(ns)
			if st, err := os.ReadFile("/sys/fs/cgroup/cpuacct/docker/" + id + "/cpuacct.stat"); err == nil {
				total.sys += time.Duration(field(st, "system")) * 10 * time.Millisecond // USER_HZ
			}
			if m, err := os.ReadFile("/sys/fs/cgroup/memory/docker/" + id + "/memory.stat"); err == nil {
				total.faults += field(m, "pgfault")
			}
			continue
		}
		dir := "/sys/fs/cgroup/system.slice/docker-" + id + ".scope/"
		b, err := os.ReadFile(dir + "cpu.stat")
		if err != nil {
			return total, false
		}
		total.cpu += time.Duration(field(b, "usage_usec")) * time.Microsecond
		total.sys += time.Duration(field(b, "system_usec")) * time.Microsecond
		if m, err := os.ReadFile(dir + "memory.stat"); err == nil {
			total.faults += field(m, "pgfault")
		}
	}
	return total, true
}

// cpuSplit is where the CPU of some calls went: Caddy, the sandboxes (what runs in
// the containers; sandboxSys the kernel's part of it, sandboxFaults their page
// faults), and the engine (dockerd, containerd and the containers' shims).
type cpuSplit struct {
	caddy, sandboxes, sandboxSys, engine time.Duration
	sandboxFaults                        int64
	// The host's: processor time busy, idle (waiting for I/O included) and stolen by
	// the hypervisor, all processors summed (/proc/stat).
	hostBusy, hostIdle, hostSteal time.Duration
}

func (c cpuSplit) minus(o cpuSplit) cpuSplit {
	return cpuSplit{c.caddy - o.caddy, c.sandboxes - o.sandboxes, c.sandboxSys - o.sandboxSys, c.engine - o.engine, c.sandboxFaults - o.sandboxFaults,
		c.hostBusy - o.hostBusy, c.hostIdle - o.hostIdle, c.hostSteal - o.hostSteal}
}

func (c cpuSplit) plus(o cpuSplit) cpuSplit {
	return cpuSplit{c.caddy + o.caddy, c.sandboxes + o.sandboxes, c.sandboxSys + o.sandboxSys, c.engine + o.engine, c.sandboxFaults + o.sandboxFaults,
		c.hostBusy + o.hostBusy, c.hostIdle + o.hostIdle, c.hostSteal + o.hostSteal}
}

// idleShare is the share of the host's processor time left idle.
func (c cpuSplit) idleShare() float64 {
	all := c.hostBusy + c.hostIdle + c.hostSteal
	if all <= 0 {
		return 0
	}
	return float64(c.hostIdle) / float64(all)
}

func (tm *team) cpuNow(ids []string) cpuSplit {
	sb, _ := containersCPU(ids)
	busy, idle, steal := hostCPU()
	return cpuSplit{
		caddy:         procCPU(tm.bin),
		sandboxes:     sb.cpu,
		sandboxSys:    sb.sys,
		sandboxFaults: sb.faults,
		engine:        procCPU("dockerd", "/var/run/docker/containerd", "containerd-shim"),
		hostBusy:      busy, hostIdle: idle, hostSteal: steal,
	}
}

// hostCPU is the host's processor time since its boot, all processors summed: busy,
// idle (waiting for I/O included) and stolen by the hypervisor.
func hostCPU() (busy, idle, steal time.Duration) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, 0
	}
	tick := func(i int) time.Duration {
		n, _ := strconv.ParseInt(f[i], 10, 64)
		return time.Duration(n) * (time.Second / 100) // USER_HZ
	}
	// user nice system idle iowait irq softirq steal (guest time is within user).
	busy = tick(1) + tick(2) + tick(3) + tick(6) + tick(7)
	return busy, tick(4) + tick(5), tick(8)
}

// procFDs is how many descriptors process pid holds.
func procFDs(pid int) (int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents), err
}

// memoryUsed is what the engine counts as the container's memory, as `docker stats`
// shows it: its cgroup's usage less the page cache it could drop (inactive files).
func memoryUsed(ctx context.Context, cli *client.Client, name string) (int64, error) {
	resp, err := cli.ContainerStatsOneShot(ctx, name)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var st container.StatsResponse
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st); err != nil {
		return 0, fmt.Errorf("stats of %s: %w", name, err)
	}
	used := int64(st.MemoryStats.Usage)
	if v, ok := st.MemoryStats.Stats["inactive_file"]; ok && int64(v) < used {
		used -= int64(v)
	}
	if used <= 0 {
		return 0, fmt.Errorf("stats of %s: no memory usage (is it running?)", name)
	}
	return used, nil
}

// rawExecTrue runs `true` in container name through the engine's exec API, as the
// baseline of an execute: create, start attached, read to the end, inspect.
func rawExecTrue(ctx context.Context, b *testing.B, cli *client.Client, name string) time.Duration {
	t0 := time.Now()
	ex, err := cli.ContainerExecCreate(ctx, name, container.ExecOptions{Cmd: []string{"true"}, AttachStdout: true, AttachStderr: true})
	if err != nil {
		b.Errorf("exec create in %s: %v", name, err)
		return time.Since(t0)
	}
	att, err := cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		b.Errorf("exec attach in %s: %v", name, err)
		return time.Since(t0)
	}
	_, _ = io.Copy(io.Discard, att.Reader)
	att.Close()
	if in, err := cli.ContainerExecInspect(ctx, ex.ID); err != nil || in.ExitCode != 0 || in.Running {
		b.Errorf("exec in %s: %+v %v", name, in, err)
	}
	return time.Since(t0)
}

// BenchmarkTeam: fifty people on one box, through a Caddy process of its own with
// warm_sandboxes 3. It reports a new person's first call (five people, one after the
// other, each once the warm sandboxes are ready again; BenchmarkWarmFirstCall compares
// with none), the memory an idle person's sandbox holds
// (the engine's figure), and execute("true") with all fifty calling at once (3 rounds
// per b.N) beside the same rounds of a raw engine exec in the same containers, how
// many commands queued for the host's processors and for how long, and Caddy's peak
// RSS. Run it with -benchtime 1x: each run makes fifty containers.
func BenchmarkTeam(b *testing.B) {
	if testing.Short() {
		b.Skip("needs Docker")
	}
	tm := startTeam(b, fmt.Sprintf("warm_sandboxes %d", teamWarm))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cli := tm.site.Docker

	// A new person's first call, five times, each once the warm sandboxes are all
	// ready (a teammate arriving); then the others arrive, five at a time.
	var first []time.Duration
	for _, p := range tm.people[:5] {
		tm.awaitWarm(b, teamWarm)
		first = append(first, tm.call(ctx, b, p, "true"))
	}
	taken, _ := testsite.MetricSum(testsite.Metrics(b, tm.http, tm.url), "caddy_mcp_sandbox_warm_taken_total", nil)
	slices.Sort(first)
	tm.arrive(ctx, b, tm.people[5:])
	if b.Failed() {
		b.FailNow()
	}

	// Idle: what each sandbox holds once its first call is done. The warm sandboxes the
	// arrivals took are made again first: the rounds measure commands, not them.
	tm.awaitWarm(b, teamWarm)
	time.Sleep(5 * time.Second)
	var idle int64
	for _, p := range tm.people {
		used, err := memoryUsed(ctx, cli, tm.site.Container+"-"+p)
		if err != nil {
			b.Fatal(err)
		}
		idle += used
	}
	idleMiB := float64(idle) / float64(len(tm.people)) / (1 << 20)

	// Everyone at once, through Caddy and raw, alternating rounds.
	pid := tm.cmd.Process.Pid
	var peak int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if v, err := procRSS(pid); err == nil {
				peak = max(peak, v)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	if tm.profiles != "" {
		// Rounds through Caddy alone while it is profiled, before those measured.
		profiled := tm.profile(b, "all-at-once", 10)
		for busy := true; busy; {
			everyone(tm.people, tm.callTrue(ctx, b))
			select {
			case <-profiled:
				busy = false
			default:
			}
		}
	}
	var ids []string
	for _, p := range tm.people {
		info, err := cli.ContainerInspect(ctx, tm.site.Container+"-"+p)
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, info.ID)
	}
	// Through Caddy first, then raw: a raw round's leftovers (the engine's exec
	// processes end after their output) would count against the next round.
	var viaCaddy, raw []time.Duration
	var cpu cpuSplit
	b.ResetTimer()
	for r := range 3 * b.N {
		before := tm.cpuNow(ids)
		took := everyone(tm.people, tm.callTrue(ctx, b))
		d := tm.cpuNow(ids).minus(before)
		cpu = cpu.plus(d)
		b.Logf("round %d through Caddy: p50 %.0f ms, p99 %.0f ms; CPU per call: Caddy %v, sandboxes %v (system %v, %d page faults), engine %v; host %v busy, %.0f%% idle, %v stolen", r+1, quantile(took, 0.5), quantile(took, 0.99),
			d.caddy/teamSize, d.sandboxes/teamSize, d.sandboxSys/teamSize, d.sandboxFaults/teamSize, d.engine/teamSize, d.hostBusy, 100*d.idleShare(), d.hostSteal)
		viaCaddy = append(viaCaddy, took...)
	}
	b.StopTimer()
	// The commands queued for the host's processors (sandbox/admit.go): the rounds'
	// and the arrivals' before them (five at a time, never more than the places).
	m := testsite.Metrics(b, tm.http, tm.url)
	queued, _ := testsite.MetricSum(m, "caddy_mcp_sandbox_commands_queued_total", nil)
	queueSecs, _ := testsite.MetricSum(m, "caddy_mcp_sandbox_command_queue_seconds_total", nil)
	if queued == 0 {
		b.Errorf("fifty commands at once on a host of %d processors: none queued", runtime.NumCPU())
	}
	time.Sleep(2 * time.Second)
	for range 3 * b.N {
		raw = append(raw, everyone(tm.people, func(p string) time.Duration {
			return rawExecTrue(ctx, b, cli, tm.site.Container+"-"+p)
		})...)
	}
	close(stop)
	<-sampled
	slices.Sort(viaCaddy)
	slices.Sort(raw)

	b.ReportMetric(quantile(first, 0.5), "first-call-median-ms")
	b.ReportMetric(taken, "warm-taken")
	b.ReportMetric(idleMiB, "idle-sandbox-MiB")
	b.ReportMetric(quantile(viaCaddy, 0.5), "all-at-once-p50-ms")
	b.ReportMetric(quantile(viaCaddy, 0.99), "all-at-once-p99-ms")
	b.ReportMetric(quantile(raw, 0.5), "raw-exec-p50-ms")
	b.ReportMetric(quantile(raw, 0.99), "raw-exec-p99-ms")
	b.ReportMetric(quantile(viaCaddy, 0.5)/quantile(raw, 0.5), "p50-vs-raw")
	b.ReportMetric(queued/float64(len(viaCaddy)), "queued-share")
	if queued > 0 {
		b.ReportMetric(queueSecs*1000/queued, "queued-wait-ms")
	}
	b.ReportMetric(float64(peak)/1024, "caddy-peak-rss-MiB")
	perCall := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(len(viaCaddy)) }
	b.ReportMetric(perCall(cpu.caddy), "caddy-cpu-ms/call")
	b.ReportMetric(perCall(cpu.sandboxes), "sandbox-cpu-ms/call")
	b.ReportMetric(perCall(cpu.engine), "engine-cpu-ms/call")
	b.ReportMetric(perCall(cpu.hostBusy), "host-cpu-ms/call")
	b.ReportMetric(cpu.idleShare(), "host-idle-share")
	b.Logf("first calls %v; idle sandbox %.1f MiB; all at once p50 %.0f ms p99 %.0f ms (raw exec p50 %.0f ms p99 %.0f ms); Caddy peak RSS %.0f MiB",
		first, idleMiB, quantile(viaCaddy, 0.5), quantile(viaCaddy, 0.99), quantile(raw, 0.5), quantile(raw, 0.99), float64(peak)/1024)
	if damonOn() {
		// docs/operations.md: its page sampling makes a sandbox's processes dearer,
		// the more so after a quiet spell; figures from hosts without it differ.
		b.Logf("the host's DAMON (kdamond) is on")
	}
	if peak >= 200<<10 {
		b.Errorf("Caddy's RSS reached %d MiB with %d people calling at once, want under 200 MiB", peak>>10, teamSize)
	}
	if idleMiB > 16 {
		b.Errorf("an idle sandbox holds %.1f MiB on average, want at most 16 MiB", idleMiB)
	}
}

// damonOn reports whether the kernel runs a DAMON context (proactive reclaim that
// samples which pages are used), as the benchmarks' figures depend on it.
func damonOn() bool {
	states, _ := filepath.Glob("/sys/kernel/mm/damon/admin/kdamonds/*/state")
	for _, f := range states {
		if b, err := os.ReadFile(f); err == nil && strings.TrimSpace(string(b)) == "on" {
			return true
		}
	}
	return false
}

// soakDuration is how long BenchmarkTeamSoak runs: MCP_SANDBOX_SOAK (a Go duration)
// or 10 minutes.
func soakDuration(b *testing.B) time.Duration {
	if v := os.Getenv("MCP_SANDBOX_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 2*time.Minute {
			b.Fatalf("MCP_SANDBOX_SOAK=%q: want a duration of at least 2m", v)
		}
		return d
	}
	return 10 * time.Minute
}

// soakSample is Caddy's state at one moment of the soak.
type soakSample struct {
	rssKiB     int64
	goroutines float64
	fds        int
}

// BenchmarkTeamSoak: fifty people each make a call a second for soakDuration
// through one Caddy process. Caddy's RSS, goroutines and descriptors at the end must
// be within 10% of where they were after the first minute (each sampled with no call
// under way). Run it with -benchtime 1x.
func BenchmarkTeamSoak(b *testing.B) {
	if testing.Short() {
		b.Skip("needs Docker")
	}
	tm := startTeam(b)
	total := soakDuration(b)
	ctx, cancel := context.WithTimeout(context.Background(), total+10*time.Minute)
	defer cancel()
	tm.arrive(ctx, b, tm.people)
	if b.Failed() {
		b.FailNow()
	}
	pid := tm.cmd.Process.Pid
	// Calls hold quiet for reading; sample takes it for writing, so that it sees
	// Caddy between calls.
	var quiet sync.RWMutex
	sample := func() soakSample {
		quiet.Lock()
		defer quiet.Unlock()
		time.Sleep(time.Second)
		rss, err := procRSS(pid)
		if err != nil {
			b.Fatal(err)
		}
		fds, err := procFDs(pid)
		if err != nil {
			b.Fatal(err)
		}
		g, ok := testsite.MetricSum(testsite.Metrics(b, tm.http, tm.url), "go_goroutines", nil)
		if !ok {
			b.Fatal("Caddy's metrics have no go_goroutines")
		}
		return soakSample{rssKiB: rss, goroutines: g, fds: fds}
	}
	var calls, failed sync.Map
	end := time.Now().Add(total)
	var wg sync.WaitGroup
	b.ResetTimer()
	for i, p := range tm.people {
		wg.Go(func() {
			// Spread over the second, so that the calls do not all start together.
			time.Sleep(time.Duration(i) * time.Second / time.Duration(len(tm.people)))
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			n, bad := 0, 0
			for time.Now().Before(end) {
				quiet.RLock()
				st, err := tm.as[p].execute(ctx, tm.keys[p], "echo "+p, 30)
				quiet.RUnlock()
				n++
				if err != nil || st["stdout"] != p+"\n" {
					bad++
				}
				<-tick.C
			}
			calls.Store(p, n)
			failed.Store(p, bad)
		})
	}
	time.Sleep(time.Minute)
	at1 := sample()
	wg.Wait()
	last := sample()
	b.StopTimer()
	n, bad := 0, 0
	for _, p := range tm.people {
		c, _ := calls.Load(p)
		f, _ := failed.Load(p)
		n, bad = n+c.(int), bad+f.(int)
	}
	b.ReportMetric(float64(n), "calls")
	b.ReportMetric(float64(last.rssKiB)/1024, "end-rss-MiB")
	b.ReportMetric(float64(last.rssKiB)/float64(at1.rssKiB), "rss-end-vs-1min")
	b.ReportMetric(last.goroutines/at1.goroutines, "goroutines-end-vs-1min")
	b.ReportMetric(float64(last.fds)/float64(at1.fds), "fds-end-vs-1min")
	b.Logf("%d calls in %v, %d failed; after 1 min: RSS %d KiB, %.0f goroutines, %d descriptors; at the end: RSS %d KiB, %.0f goroutines, %d descriptors",
		n, total, bad, at1.rssKiB, at1.goroutines, at1.fds, last.rssKiB, last.goroutines, last.fds)
	if bad > 0 {
		b.Errorf("%d of %d calls failed", bad, n)
	}
	within := func(what string, first, end float64) {
		if end > first*1.1 {
			b.Errorf("%s grew from %.0f after the first minute to %.0f at the end: more than 10%%", what, first, end)
		}
	}
	within("RSS (KiB)", float64(at1.rssKiB), float64(last.rssKiB))
	within("goroutines", at1.goroutines, last.goroutines)
	within("descriptors", float64(at1.fds), float64(last.fds))
}
