package sandbox

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
)

// allocated returns the bytes f allocates on the heap (cumulative, freed or not).
func allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// allocSlack absorbs what the runtime and the test itself allocate around a measured
// call; every bound below is this plus what the limits allow.
const allocSlack = 8 << 10

// amplify repeats p up to n times, but to no more than 1 MiB: the bounds must not
// depend on how much the container sends.
func amplify(p []byte, n int) []byte {
	if len(p) == 0 || n <= 1 {
		return p
	}
	n = min(n, (1<<20)/len(p)+1)
	return bytes.Repeat(p, n)
}

func TestJobHeaderStrict(t *testing.T) {
	good := map[string]header{
		"MCPJOB1 done 7 12 3 0 0 12 3 - - - - - -":             {state: "done", exit: 7, outSize: 12, errSize: 3, outSent: 12, errSent: 3, outLines: -1, errLines: -1, outLine: -1, errLine: -1, ranMs: -1},
		"MCPJOB1 running - 100 0 40 0 60 0 5 - - - - held:42,": {state: "running", exit: -1, outSize: 100, outFrom: 40, outSent: 60, outLines: 5, errLines: -1, outLine: -1, errLine: -1, ranMs: -1, held: "42"},
		"MCPJOB1 lost - 0 0 0 0 0 0 - - - - - -":               {state: "lost", exit: -1, outLines: -1, errLines: -1, outLine: -1, errLine: -1, ranMs: -1},
		"MCPJOB1 done 137 0 0 0 0 0 0 - - - - - timedout,killed,": {state: "done", exit: 137, outLines: -1, errLines: -1, outLine: -1, errLine: -1, ranMs: -1,
			timedOut: true, killed: true},
		"MCPJOB1 done 137 0 0 0 0 0 0 - - - - 3000 cancelled,":  {state: "done", exit: 137, outLines: -1, errLines: -1, outLine: -1, errLine: -1, ranMs: 3000, cancelled: true},
		"MCPJOB1 running - 900 0 400 0 300 0 20 - 17 - - -":     {state: "running", exit: -1, outSize: 900, outFrom: 400, outSent: 300, outLines: 20, errLines: -1, outLine: 17, errLine: -1, ranMs: -1},
		"MCPJOB1 done 0 0 0 0 0 0 0 - - - - 14012 -":            {state: "done", outLines: -1, errLines: -1, outLine: -1, errLine: -1, ranMs: 14012},
		"MCPJOB1 running - 0 0 0 0 0 0 - - - - - inputwaiting,": {state: "running", exit: -1, outLines: -1, errLines: -1, outLine: -1, errLine: -1, ranMs: -1, inputWaiting: true},
		"MCPJOB1 done 0 4 0 0 0 4 0 - - - - 20 inputsent,":      {state: "done", outSize: 4, outSent: 4, outLines: -1, errLines: -1, outLine: -1, errLine: -1, ranMs: 20, inputSent: true},
		// The command line of a background process: hex, controls and bidi overrides
		// shown as spaces, an incomplete character at the end dropped.
		"MCPJOB1 done 0 0 0 0 0 0 0 - - - - - bg:j0123456789ab:1628:707974686f6e33206170702e7079,": {state: "done", outLines: -1, errLines: -1, outLine: -1, errLine: -1, ranMs: -1,
			bgJob: "j0123456789ab", bgPid: "1628", bgCmd: "python3 app.py"},
		"MCPJOB1 done 0 0 0 0 0 0 0 - - - - - bg:j0123456789ab:7:611b5b326a0ae280ae62e2,": {state: "done", outLines: -1, errLines: -1, outLine: -1, errLine: -1, ranMs: -1,
			bgJob: "j0123456789ab", bgPid: "7", bgCmd: "a [2j  b"},
		"MCPJOB1 done 0 0 0 0 0 0 0 - - - - - bg:j0123456789ab:7:,": {state: "done", outLines: -1, errLines: -1, outLine: -1, errLine: -1, ranMs: -1,
			bgJob: "j0123456789ab", bgPid: "7"},
		"MCPJOB1 peek 10 20":   {state: "peek", outSize: 10, errSize: 20},
		"MCPJOB1 oldbash 5.0":  {state: "oldbash", extra: "5.0"},
		"MCPJOB1 unknown":      {state: "unknown"},
		"MCPJOB1 inputwaiting": {state: "inputwaiting"},
		"MCPJOB1 notty":        {state: "notty"},
	}
	for line, want := range good {
		got, err := parseHeader([]byte(line))
		if err != nil || got != want {
			t.Errorf("parseHeader(%q) = %+v, %v; want %+v", line, got, err, want)
		}
	}
	bad := []string{
		"",
		"MCPJOB1",
		"MCPJOB2 done 0 0 0 0 0 0 0 - - -",
		"MCPJOB1 pwned",
		"MCPJOB1 unknown extra",
		"MCPJOB1 done 0 0 0 0 0 0 0 - - - - -", // a field short
		"MCPJOB1 done 0 0 0 0 0 0 0 - - - - - - x", // a field more
		"MCPJOB1 done 0  0 0 0 0 0 - - - - - -",    // an empty field
		"MCPJOB1 done 0 -5 0 0 0 0 0 - - - - - -",  // negative size
		"MCPJOB1 done 0 +5 0 0 0 0 0 - - - - - -",  // sign
		"MCPJOB1 done 0 05 0 0 0 0 0 - - - - - -",  // leading zero
		"MCPJOB1 done 0 99999999999999999999 0 0 0 0 0 - - - - - -",
		"MCPJOB1 done 0 5 0 9 0 0 0 - - - - - -",                                                    // offset past the end of the file
		"MCPJOB1 done 0 5 0 0 0 9 0 - - - - - -",                                                    // more sent than the file holds
		"MCPJOB1 done - 0 0 0 0 0 0 - - - - - -",                                                    // done without an exit status
		"MCPJOB1 running 0 0 0 0 0 0 0 - - - - - -",                                                 // running with one
		"MCPJOB1 done 256 0 0 0 0 0 0 - - - - - -",                                                  // no such exit status
		"MCPJOB1 done 0 0 0 0 0 0 0 - - - - - held:1;rm,",                                           // a pid that is not a number
		"MCPJOB1 done 0 0 0 0 0 0 0 - - - - - timedout",                                             // flags end with a comma
		"MCPJOB1 done 0 0 0 0 0 0 0 - - - - - bg:j0123:7:61,",                                       // not a job id
		"MCPJOB1 done 0 0 0 0 0 0 0 - - - - - bg:j0123456789ab:x:61,",                               // not a pid
		"MCPJOB1 done 0 0 0 0 0 0 0 - - - - - bg:j0123456789ab:7:6,",                                // odd hex
		"MCPJOB1 done 0 0 0 0 0 0 0 - - - - - bg:j0123456789ab:7:zz,",                               // not hex
		"MCPJOB1 done 0 0 0 0 0 0 0 - - - - - bg:j0123456789ab:7,",                                  // no command
		"MCPJOB1 done 0 0 0 0 0 0 0 - - - - - bg:j0123456789ab:7:" + strings.Repeat("61", 81) + ",", // too long
		"MCPJOB1 done 0 0 0 0 0 0 0 - - - - - sudo,",                                                // unknown flag
		"MCPJOB1 done 0 0 0 0 0 0 0 x - - - - -",
		"MCPJOB1 done 0 0 0 0 0 0 0 - - 0 - - -",               // no line 0
		"MCPJOB1 done 0 0 0 0 0 0 0 - - - - 999999999999999 -", // runs for longer than ten years
		"MCPJOB1 done 0 0 0 0 0 0 0 - - - - 1.5 -",
		"MCPJOB1 oldbash 5.0;reboot",
		"MCPJOB1 oldbash",
		"MCPJOB1 peek 1",
		"MCPJOB1 peek 1 -2",
		"MCPJOB1 done 0 0 0 0 0 0 0 - - - - - -" + strings.Repeat(" ", maxHeaderLine),
	}
	for _, line := range bad {
		if h, err := parseHeader([]byte(line)); !errors.Is(err, errBadAnswer) {
			t.Errorf("parseHeader(%q) = %+v, %v; want an error", human.Clip(line, 80), h, err)
		}
	}
}

// TestScriptOutputBounds: a header line without end and a payload beyond the limit
// keep no more than their limits, and such a header is refused.
func TestScriptOutputBounds(t *testing.T) {
	o := &scriptOutput{limit: 1000}
	chunk := bytes.Repeat([]byte("x"), 32<<10)
	for range 8 {
		o.stdout(chunk)
	}
	o.stdout([]byte("\n"))
	o.stdout(chunk)
	o.stderr(chunk)
	if len(o.line) > maxHeaderLine+1 || len(o.out) != 1000 || len(o.err) != 1000 {
		t.Errorf("kept a header of %d bytes and payloads of %d and %d", len(o.line), len(o.out), len(o.err))
	}
	if _, err := parseHeader(o.line); err == nil {
		t.Error("a header of 256 KiB was accepted")
	}
}

func TestJobListParse(t *testing.T) {
	out := strings.Join([]string{
		"JOB j0000000100aa done 0 1700000000 300.000 0 - echo hi",
		"JOB j0000000200bb running - 1700000001 2.500 1 - python3 -i",
		"JOB j0000000300cc lost - 1700000002 60.000 0 - ",
		"JOB j0000000400dd done 1 1700000003 60.000 0 - " + strings.Repeat("é", 200),
		"JOB J0000000500ee done 0 1700000004 60.000 0 - bad id",
		"JOB j0000000600ff done -1 1700000005 60.000 0 - bad exit",
		"JOB j0000000700aa done 0 1700000006 1e9 0 - bad timeout",
		"JOB j0000000800aa running - 1700000007 60.000 2 - bad interactive",
		"JOB j0000000900aa done 0 1700000008 60.000 0 - " + strings.Repeat("x", listLineMax),
		"JOB j0000000a00aa done 0 1700000009 60.000 0 - \xff\xfe broken text",
		"JOB j0000000b00aa done 137 1700000010 60.000 0 cancelled sleep 100",
		"JOB j0000000c00aa done 137 1700000011 60.000 0 timedout sleep 100",
		"JOB j0000000d00aa done 137 1700000012 60.000 0 reboot bad why",
		"garbage",
		"",
	}, "\n")
	jobs, err := parseJobList([]byte(out), 10, 20)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, j := range jobs {
		got = append(got, fmt.Sprintf("%s %s %d %d %v %v %q%s", j.ID, j.State, j.ExitCode, j.Started.Unix(), j.Timeout, j.Interactive, j.Command, j.KilledBy))
	}
	want := []string{
		`j0000000100aa done 0 1700000000 5m0s false "echo hi"`,
		`j0000000200bb running -1 1700000001 2.5s true "python3 -i"`,
		`j0000000300cc lost -1 1700000002 1m0s false ""`,
		`j0000000400dd done 1 1700000003 1m0s false "éééééééééé…"`,
		`j0000000a00aa done 0 1700000009 1m0s false "� broken text"`,
		`j0000000b00aa done 137 1700000010 1m0s false "sleep 100"client`,
		`j0000000c00aa done 137 1700000011 1m0s false "sleep 100"timeout`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("parsed:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The newest are kept.
	jobs, _ = parseJobList([]byte(out), 2, 20)
	if len(jobs) != 2 || jobs[0].ID != "j0000000b00aa" || jobs[1].ID != "j0000000c00aa" {
		t.Errorf("with 2 at most: %+v", jobs)
	}
	// An old bash answers with its header.
	if _, err := parseJobList([]byte("MCPJOB1 oldbash 4.4\n"), 10, 20); !errors.Is(err, boxapi.ErrOldBash) || !strings.Contains(err.Error(), "bash is 4.4; commands need bash 5.1 or newer") {
		t.Errorf("old bash listing: %v", err)
	}
}

// FuzzJobHeader: parseHeader takes any line without panicking, allocates no more than
// a header line's worth whatever the line holds, and what it accepts is consistent.
// Bound: allocSlack (the error message clips the line to 200 bytes).
func FuzzJobHeader(f *testing.F) {
	for _, s := range []string{
		"MCPJOB1 done 0 12 3 0 0 12 3 - - - - - -",
		"MCPJOB1 running - 100 0 40 0 60 0 5 - - - - held:42,timedout,",
		"MCPJOB1 done 0 0 0 0 0 0 0 - - - - - bg:j0123456789ab:1628:707974686f6e33,",
		"MCPJOB1 peek 1 2", "MCPJOB1 oldbash 5.0", "MCPJOB1 taken", "MCPJOB1 done 0 0 0 0 0 0 0 - - - - - inputwaiting,",
		strings.Repeat("MCPJOB1 ", 1000),
	} {
		f.Add([]byte(s), uint16(1))
	}
	f.Fuzz(func(t *testing.T, line []byte, rep uint16) {
		line = amplify(line, int(rep))
		var h header
		var err error
		if n := allocated(func() { h, err = parseHeader(line) }); n > allocSlack {
			t.Fatalf("parseHeader of %d bytes allocated %d bytes", len(line), n)
		}
		if err != nil {
			return
		}
		if len(line) > maxHeaderLine || h.outFrom > h.outSize || h.errFrom > h.errSize || h.outSize > maxFieldNumber ||
			h.outSent > h.outSize-h.outFrom || h.errSent > h.errSize-h.errFrom || h.outSent < 0 || h.errSent < 0 || len(h.held) > 10 ||
			len(h.bgCmd) > 3*maxBackgroundCommand || strings.ContainsFunc(h.bgCmd, unicode.IsControl) {
			t.Fatalf("accepted %q as %+v", line, h)
		}
	})
}

// FuzzScriptOutput: whatever a job runner sends on an exec (any header, any payloads,
// framed as Docker does, in any chunks), reading it keeps within its limits. Bound:
// demux's 32 KiB buffer, the header line twice over (maxHeaderLine), each payload
// twice over (the limit, head plus tail of maxOutput), and the result's text: each
// stream's kept bytes a few times over (copies, U+FFFD for bad bytes, the marker).
func FuzzScriptOutput(f *testing.F) {
	f.Add([]byte("MCPJOB1 done 0 5 0 0 0 5 0 - - - - - -\nhello"), []byte("oops"), uint16(1), uint16(7), uint16(1000))
	f.Add([]byte("MCPJOB1 running - 900000 0 0 0 2048 0 20000 - - - - -\n"+strings.Repeat("line\n", 400)), []byte(""), uint16(50), uint16(100), uint16(0))
	f.Add([]byte("no header at all"), []byte(strings.Repeat("e", 100)), uint16(200), uint16(30000), uint16(5000))
	f.Add([]byte("MCPJOB1 done 0 70000 70000 0 0 3000 3000 9 9 - - - -\n"+strings.Repeat("\xe2\x82", 1000)), []byte("\xff"), uint16(3), uint16(13), uint16(1))
	f.Fuzz(func(t *testing.T, stdout, stderr []byte, rep, chunk, maxOut uint16) {
		stdout, stderr = amplify(stdout, int(rep)), amplify(stderr, int(rep))
		maxOutput := minMaxOutput + int(maxOut)
		keep, head, tail := budget(maxOutput)
		limit := head + tail
		var stream bytes.Buffer
		frame(&stream, 1, stdout, int(chunk)+1)
		frame(&stream, 2, stderr, int(chunk)+1)
		raw := stream.Bytes()
		var res *boxapi.ExecResult
		n := allocated(func() {
			o := &scriptOutput{limit: limit}
			if err := demux(bytes.NewReader(raw), o.stdout, o.stderr); err != nil || !o.gotHdr {
				return
			}
			h, err := parseHeader(o.line)
			if err != nil || (h.state != "done" && h.state != "running" && h.state != "lost") {
				return
			}
			res, _ = h.result("j0123456789ab", o, maxOutput, [2][]byte{})
		})
		bound := uint64(allocSlack + 32<<10 + 2*(maxHeaderLine+1) + 2*2*limit + 2*(16*keep+1024))
		if n > bound {
			t.Fatalf("reading %d+%d bytes kept to %d allocated %d bytes, over %d", len(stdout), len(stderr), limit, n, bound)
		}
		if res != nil {
			for _, s := range []string{res.Stdout, res.Stderr} {
				if !utf8.ValidString(s) || len(s) > 3*keep+512 {
					t.Fatalf("result text of %d bytes (keep %d), valid %v", len(s), keep, utf8.ValidString(s))
				}
			}
		}
	})
}

// frame writes p to w as Docker's multiplexed frames of stream st, size bytes each.
func frame(w io.Writer, st byte, p []byte, size int) {
	for len(p) > 0 {
		k := min(size, len(p))
		var hdr [8]byte
		hdr[0] = st
		binary.BigEndian.PutUint32(hdr[4:], uint32(k))
		w.Write(hdr[:])
		w.Write(p[:k])
		p = p[k:]
	}
}

// FuzzJobList: parseJobList keeps at most maxJobs jobs, each command valid UTF-8 and
// cut to maxCommand, and allocates for those alone, whatever the listing holds.
// Bound: the jobs slice grown by doubling (twice maxJobs entries), and per job its id
// and its command (a copy, U+FFFD for bad bytes, the "…").
func FuzzJobList(f *testing.F) {
	f.Add([]byte("JOB j0000000100aa done 0 1700000000 300.000 0 - echo hi\nJOB j0000000200bb running - 1700000001 2.500 1 - cat\n"), uint16(1), uint8(10), uint16(200))
	f.Add([]byte("JOB j0000000100aa done 0 1700000000 300.000 0 - \xff\xfe\xfd\n"), uint16(5000), uint8(3), uint16(50))
	f.Add([]byte("JOB j0000000100aa done 0 1700000000 300.000 0 - "+strings.Repeat("x", 2000)+"\n"), uint16(300), uint8(200), uint16(300))
	f.Add([]byte("garbage line\n"), uint16(60000), uint8(255), uint16(10))
	f.Add([]byte("MCPJOB1 oldbash 4.4\n"), uint16(1), uint8(1), uint16(1))
	f.Fuzz(func(t *testing.T, out []byte, rep uint16, maxJobs uint8, maxCommand uint16) {
		out = amplify(out, int(rep))
		mj, mc := int(maxJobs)+1, int(maxCommand)%1000+1
		var jobs []boxapi.JobInfo
		var err error
		n := allocated(func() { jobs, err = parseJobList(out, mj, mc) })
		size := int(unsafe.Sizeof(boxapi.JobInfo{}))
		bound := uint64(allocSlack + 2*max(mj, 64)*size + mj*(16+8*mc+64))
		if n > bound {
			t.Fatalf("listing of %d bytes (max %d jobs, %d bytes of command) allocated %d bytes, over %d", len(out), mj, mc, n, bound)
		}
		if err != nil {
			return
		}
		if len(jobs) > mj {
			t.Fatalf("%d jobs kept, max %d", len(jobs), mj)
		}
		for _, j := range jobs {
			if !boxapi.ValidJobID(j.ID) || !utf8.ValidString(j.Command) || len(j.Command) > 2*mc+6 ||
				(j.State != "running" && j.State != "done" && j.State != "lost") || (j.ExitCode >= 0) != (j.State == "done") {
				t.Fatalf("kept %+v", j)
			}
		}
	})
}

// FuzzExecFrames: both users of the one reader of Docker's multiplexed exec stream
// (dockerReader: demux for the job runner, execStream for other programs) take any bytes, and allocate a fixed amount
// whatever the frames say: demux's 32 KiB buffer, a Docker error message of at most
// 4 KiB (read, then copied into the error), execStream's 4 KiB of standard error
// (bytes.Buffer may double it).
func FuzzExecFrames(f *testing.F) {
	var seed bytes.Buffer
	frame(&seed, 1, []byte("out"), 2)
	frame(&seed, 2, []byte("err"), 1)
	f.Add(seed.Bytes(), uint16(1))
	f.Add(seed.Bytes(), uint16(20000))
	f.Add([]byte("\x03\x00\x00\x00\xff\xff\xff\xffdocker error"), uint16(1))
	f.Add([]byte("\x01\x00\x00\x00\x7f\xff\xff\xff"), uint16(1))
	f.Add([]byte("\x02\x00\x00\x00\x00\x00\x00\x01e"), uint16(50000))
	f.Add([]byte("\x03"), uint16(49832)) // a Docker error frame claiming 50 MB
	f.Fuzz(func(t *testing.T, raw []byte, rep uint16) {
		raw = amplify(raw, int(rep))
		var outN, errN int
		n := allocated(func() {
			_ = demux(bytes.NewReader(raw), func(p []byte) { outN += len(p) }, func(p []byte) { errN += len(p) })
		})
		if n > allocSlack+32<<10+2*4<<10 {
			t.Fatalf("demux of %d bytes allocated %d bytes", len(raw), n)
		}
		if outN+errN > len(raw) {
			t.Fatalf("demux passed on %d bytes of %d", outN+errN, len(raw))
		}
		e := &execStream{p: &dockerProc{out: dockerReader{r: bufio.NewReader(bytes.NewReader(raw))}}, stderr: &boundedBuffer{max: 4096}, done: make(chan struct{})}
		var buf [4096]byte
		n = allocated(func() {
			for {
				if _, err := e.Read(buf[:]); err != nil {
					return
				}
			}
		})
		if n > allocSlack+2*4096+2*4<<10 {
			t.Fatalf("execStream read of %d bytes allocated %d bytes", len(raw), n)
		}
		if len(e.stderr.String()) > 4096 {
			t.Fatalf("execStream kept %d bytes of standard error", len(e.stderr.String()))
		}
	})
}

// TestRunnerChecksBashFirst: the bash version check is the runner's first statement,
// so it costs no exec of its own and runs before anything an old bash would get wrong.
func TestRunnerChecksBashFirst(t *testing.T) {
	if !strings.HasPrefix(jobScript, "if ((BASH_VERSINFO[0] < 5 || (BASH_VERSINFO[0] == 5 && BASH_VERSINFO[1] < 1))); then\n") {
		t.Errorf("the job runner starts with %q", human.Clip(jobScript, 120))
	}
}
