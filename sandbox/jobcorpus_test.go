package sandbox

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentbin"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentwire"
)

// The job corpus (testdata/jobs/*.txtar) runs each case against both job runners on
// this machine, without Docker: jobs.sh under the host's bash, as the fallback runs it
// (one process per call), and the agent's native runner, the committed agent binary
// serving a session over pipes, reached as Caddy reaches it (agentRunner, the proc it
// returns, readScript). Both must give the bytes the case's "want" section holds:
// headers, payloads and listings, with only times and pids made neutral.
//
// A case's "steps" section holds one call a line:
//
//	run [id=N] [cmd=SECTION] [wait=S|-1] [timeout=S] [head=N] [tail=N] [interactive] [tty] [stdin] [cwd=DIR]
//	poll [id=N] [wait=S] [input=SECTION] [again]
//	kill [id=N] [cancelled]
//	peek [id=N] [max=N]
//	list
//	settle [id=N] out=BYTES   (the case waits until the job's stdout file holds BYTES)
//	ended [id=N]              (the case waits until the job's status is written)
//
// Sections named by cmd= and input= hold the command and the input, their last newline
// left out (write "\n" in an input as a line of its own). Run with -update to write
// "want" from the fallback runner; the native one must then agree.

var updateCorpus = flag.Bool("update", false, "rewrite the want sections of testdata/jobs from jobs.sh")

func TestJobCorpus(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the job runners need Linux")
	}
	if out, err := exec.Command("bash", "-c", `((BASH_VERSINFO[0] > 5 || (BASH_VERSINFO[0] == 5 && BASH_VERSINFO[1] >= 1))) && echo ok`).Output(); err != nil || string(out) != "ok\n" {
		t.Skip("the job runners need bash 5.1 or newer on this machine")
	}
	bin, _, ok := agentbin.Binary(runtime.GOARCH)
	if !ok {
		t.Skipf("no agent binary for %s", runtime.GOARCH)
	}
	agentPath := filepath.Join(t.TempDir(), "sandbox-agent")
	if err := os.WriteFile(agentPath, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("testdata/jobs/*.txtar")
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) {
			t.Parallel()
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			c := parseTxtar(raw)
			shell := runCorpusCase(t, c, &shellRunner{}, agentPath)
			native := runCorpusCase(t, c, newAgentCorpusRunner(t, agentPath), agentPath)
			if *updateCorpus {
				if err := os.WriteFile(file, c.with("want", shell), 0o644); err != nil {
					t.Fatal(err)
				}
			} else if want := c.section("want"); shell != want {
				t.Errorf("jobs.sh:\n%s", lineDiff(want, shell))
			}
			if native != shell {
				t.Errorf("the native runner differs from jobs.sh:\n%s", lineDiff(shell, native))
			}
		})
	}
}

// corpusEnv is the environment both runners start with: the Debian image's.
func corpusEnv() []string {
	return []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", "HOME=/root"}
}

// corpusRunner starts jobs and runs the other modes of the job runner: args and env as
// Caddy gives them, stdin as the mode's input (nil: none).
type corpusRunner interface {
	start(t *testing.T, j jobStart) (stdout, stderr []byte)
	call(t *testing.T, args, env []string, stdin []byte) (stdout, stderr []byte)
	list(t *testing.T, dir string) []byte
}

// shellRunner runs jobs.sh as the fallback does: one bash per call.
type shellRunner struct{}

func (shellRunner) call(t *testing.T, args, env []string, stdin []byte) ([]byte, []byte) {
	t.Helper()
	cmd, env := runnerExec(args, env)
	c := exec.Command(cmd[0], cmd[1:]...)
	c.Env, c.Dir = append(corpusEnv(), env...), "/"
	if stdin != nil {
		c.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		t.Fatalf("jobs.sh %v: %v (%s)", args, err, errb.Bytes())
	}
	return out.Bytes(), errb.Bytes()
}

func (r shellRunner) start(t *testing.T, j jobStart) ([]byte, []byte) {
	args, env, stdin := j.script()
	return r.call(t, args, env, stdin)
}

func (r shellRunner) list(t *testing.T, dir string) []byte {
	out, _ := r.call(t, []string{"list", dir, "-"}, nil, nil)
	return out
}

// agentCorpusRunner is an agent serving a session over pipes; "run" goes to its native
// runner, the other modes to jobs.sh through it, as in a container.
type agentCorpusRunner struct {
	sb   *Sandbox
	sess *agentwire.Session
}

func newAgentCorpusRunner(t *testing.T, agentPath string) *agentCorpusRunner {
	t.Helper()
	cmd := exec.Command(agentPath, "serve")
	cmd.Env, cmd.Dir = corpusEnv(), "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sess, err := agentwire.Client(out, in, in, agentwire.HelloMsg{}, nil)
	if err != nil {
		_ = cmd.Process.Kill()
		t.Fatalf("the agent's greeting: %v (%s)", err, stderr.Bytes())
	}
	t.Cleanup(func() {
		sess.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("the agent did not end with its session")
		}
	})
	return &agentCorpusRunner{sb: wire(nil, Config{}, zap.NewNop()), sess: sess}
}

func (r *agentCorpusRunner) start(t *testing.T, j jobStart) ([]byte, []byte) {
	t.Helper()
	req, stdin := j.request()
	p, err := r.sb.link.agentStart(r.sess, req)
	if err != nil {
		t.Fatalf("agent %+v: %v", req, err)
	}
	return r.answer(t, "run", r.sb.runner.readScript(p, stdin, 64<<20))
}

func (r *agentCorpusRunner) call(t *testing.T, args, env []string, stdin []byte) ([]byte, []byte) {
	t.Helper()
	p, err := r.sb.link.agentRunner(r.sess, args, env, stdin != nil)
	if err != nil {
		t.Fatalf("agent %v: %v", args, err)
	}
	return r.answer(t, args[0], r.sb.runner.readScript(p, stdin, 64<<20))
}

// answer waits for a runner's answer and returns it as the runner wrote it.
func (r *agentCorpusRunner) answer(t *testing.T, args string, run *scriptRun) ([]byte, []byte) {
	t.Helper()
	var err error
	defer run.close()
	select {
	case err = <-run.done:
	case <-time.After(time.Minute):
		t.Fatalf("agent %v: no answer within a minute", args)
	}
	if err != nil {
		t.Fatalf("agent %v: %v", args, err)
	}
	o := run.out
	if !o.gotHdr {
		return o.line, o.err
	}
	return append(append(append([]byte(nil), o.line...), '\n'), o.out...), o.err
}

// list runs the listing as ListJobs does: a plain program on the agent.
func (r *agentCorpusRunner) list(t *testing.T, dir string) []byte {
	t.Helper()
	cmd, env := runnerExec([]string{"list", dir, "-"}, nil)
	p, err := r.sb.link.agentStart(r.sess, agentwire.ExecRequest{Argv: cmd, Env: env, Dir: "/"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var out bytes.Buffer
	if err := drain(p, func(b []byte) { out.Write(b) }, func([]byte) {}); err != nil {
		t.Fatal(err)
	}
	if code, ok := p.exitCode(context.Background(), false); !ok || code != 0 {
		t.Fatalf("listing: exit code %d (%v)", code, ok)
	}
	return out.Bytes()
}

// runCorpusCase runs c's steps on r in a fresh jobs directory and returns the
// transcript: each step, then what it answered.
func runCorpusCase(t *testing.T, c txtar, r corpusRunner, agentPath string) string {
	t.Helper()
	// A name of fixed length: output that shows it has the same size in every run.
	dir := filepath.Join(os.TempDir(), "jobcorpus-"+randomHex(8))
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	jobs := filepath.Join(dir, "jobs")
	var b strings.Builder
	t.Cleanup(func() { endJobs(t, jobs) })
	for _, line := range strings.Split(strings.TrimSpace(c.section("steps")), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		opt := map[string]string{}
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			opt[k] = v
		}
		get := func(k, def string) string {
			if v, ok := opt[k]; ok {
				return v
			}
			return def
		}
		n, _ := strconv.Atoi(get("id", "1"))
		id := fmt.Sprintf("j%012x", n)
		fmt.Fprintf(&b, "> %s\n", line)
		var out, errOut []byte
		switch f[0] {
		case "run":
			j := jobStart{dir: jobs, id: id, interactive: has(opt, "interactive"), tty: has(opt, "tty"),
				agent: agentPath, command: strings.TrimSuffix(c.section(get("cmd", "cmd")), "\n")}
			if _, ok := opt["stdin"]; ok { // as a command over the environment's limit goes
				j.command += "\n" + strings.Repeat("#", commandEnvLimit)
			}
			cwd := strings.ReplaceAll(get("cwd", dir), `\x20`, " ")
			if !strings.HasPrefix(cwd, "/") {
				cwd = filepath.Join(dir, cwd)
				if err := os.MkdirAll(cwd, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			j.cwd = cwd
			j.timeout, j.wait = seconds(get("timeout", "30")), seconds(get("wait", "-1"))
			j.head, _ = strconv.Atoi(get("head", "1000"))
			j.tail, _ = strconv.Atoi(get("tail", "1000"))
			out, errOut = r.start(t, j)
		case "poll":
			mode, env := "-", []string(nil)
			if sec, ok := opt["input"]; ok {
				in := strings.ReplaceAll(strings.TrimSuffix(c.section(sec), "\n"), `\n`, "\n")
				mode, env = "env", []string{"MCP_SANDBOX_INPUT=" + in}
			}
			args := []string{"poll", jobs, id, get("wait", "0"), get("head", "1000"), get("tail", "1000"), mode}
			if _, ok := opt["again"]; ok {
				args = append(args, "again")
			}
			out, errOut = r.call(t, args, env, nil)
		case "kill":
			why := "killed"
			if _, ok := opt["cancelled"]; ok {
				why = "cancelled"
			}
			out, errOut = r.call(t, []string{"kill", jobs, id, get("head", "1000"), get("tail", "1000"), why}, nil, nil)
		case "peek":
			out, errOut = r.call(t, []string{"peek", jobs, id, "-", "-", get("max", "4096")}, nil, nil)
		case "list":
			out = r.list(t, jobs)
		case "settle":
			want, _ := strconv.ParseInt(opt["out"], 10, 64)
			waitFor(t, line, func() bool {
				fi, err := os.Stat(filepath.Join(jobs, id+".out"))
				return err == nil && fi.Size() >= want
			})
			continue
		case "ended":
			waitFor(t, line, func() bool {
				fi, err := os.Stat(filepath.Join(jobs, id+".exit"))
				return err == nil && fi.Size() > 0
			})
			continue
		default:
			t.Fatalf("unknown step %q", line)
		}
		writeAnswer(t, &b, f[0], out, errOut)
	}
	return strings.ReplaceAll(b.String(), dir, "$WORK")
}

// endJobs kills every job in dir that has not ended (those a command left running as
// jobs of their own too) and waits for their status: nothing a case started outlives it.
func endJobs(t *testing.T, dir string) {
	metas, _ := filepath.Glob(filepath.Join(dir, "*.meta"))
	for _, m := range metas {
		id := strings.TrimSuffix(filepath.Base(m), ".meta")
		if _, err := os.Stat(filepath.Join(dir, id+".exit")); err == nil {
			continue
		}
		_, _ = (shellRunner{}).call(t, []string{"kill", dir, id, "0", "0", "killed"}, nil, nil)
		waitFor(t, "the end of "+id, func() bool {
			fi, err := os.Stat(filepath.Join(dir, id+".exit"))
			return err == nil && fi.Size() > 0
		})
	}
}

// has reports whether a step has the option k.
func has(opt map[string]string, k string) bool {
	_, ok := opt[k]
	return ok
}

// seconds reads a step's seconds; -1 is waitToEnd.
func seconds(s string) time.Duration {
	if s == "-1" {
		return waitToEnd
	}
	f, _ := strconv.ParseFloat(s, 64)
	return time.Duration(f * float64(time.Second))
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: not within 20 s", what)
		}
	}
}

// writeAnswer writes one answer to the transcript: the header (or the listing's
// lines) with times and pids made neutral, then each stream's payload, quoted.
func writeAnswer(t *testing.T, b *strings.Builder, mode string, out, errOut []byte) {
	t.Helper()
	if mode == "list" {
		for _, line := range strings.SplitAfter(string(out), "\n") {
			if line == "" {
				continue
			}
			f := strings.SplitN(line, " ", 9)
			if len(f) == 9 && f[0] == "JOB" {
				f[4] = "T" // the start time
			}
			b.WriteString(strconv.Quote(strings.Join(f, " ")) + "\n")
		}
		return
	}
	line, payload, _ := bytes.Cut(out, []byte{'\n'})
	h, err := parseHeader(line)
	if err != nil {
		t.Errorf("%s answered %q: %v", mode, out, err)
	}
	f := strings.Split(string(line), " ")
	if len(f) == 15 {
		if h.ranMs >= 0 {
			f[13] = "R"
		}
		var flags []string
		for _, fl := range strings.Split(strings.TrimSuffix(f[14], ","), ",") {
			switch {
			case strings.HasPrefix(fl, "held:"):
				fl = "held:P"
			case strings.HasPrefix(fl, "bg:"):
				fl = "bg:J:P:" + fl[strings.LastIndexByte(fl, ':')+1:]
			}
			flags = append(flags, fl)
		}
		f[14] = strings.Join(flags, ",")
		if f[14] != "-" {
			f[14] += ","
		}
	}
	fmt.Fprintf(b, "%s\nstdout %q\nstderr %q\n", strings.Join(f, " "), payload, errOut)
}

// txtar is a txtar archive: a comment, then files each opened by a "-- name --" line.
type txtar struct {
	comment string
	names   []string
	data    map[string]string
}

func parseTxtar(raw []byte) txtar {
	a := txtar{data: map[string]string{}}
	name := ""
	for _, line := range strings.SplitAfter(string(raw), "\n") {
		switch {
		case strings.HasPrefix(line, "-- ") && strings.HasSuffix(line, " --\n"):
			name = strings.TrimSuffix(strings.TrimPrefix(line, "-- "), " --\n")
			a.names = append(a.names, name)
			a.data[name] = ""
		case name == "":
			a.comment += line
		default:
			a.data[name] += line
		}
	}
	return a
}

func (a txtar) section(name string) string { return a.data[name] }

// with returns the archive with section name set to data.
func (a txtar) with(name, data string) []byte {
	var b bytes.Buffer
	b.WriteString(a.comment)
	seen := false
	for _, n := range a.names {
		v := a.data[n]
		if n == name {
			v, seen = data, true
		}
		fmt.Fprintf(&b, "-- %s --\n%s", n, v)
	}
	if !seen {
		fmt.Fprintf(&b, "-- %s --\n%s", name, data)
	}
	return b.Bytes()
}

// lineDiff shows the first lines where got differs from want.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < max(len(w), len(g)) && shown < 8; i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d:\n  want %s\n  got  %s\n", i+1, wl, gl)
			shown++
		}
	}
	return b.String()
}
