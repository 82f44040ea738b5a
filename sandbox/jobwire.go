package sandbox

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
)

// The job runner's answers come out of the container, where the model is root: the
// readers here take them strictly and keep no more than their limits, whatever comes.
// A header is one line of at most maxHeaderLine bytes; a listing keeps at most
// maxListedJobs jobs of listLineMax bytes each, each command cut to maxListedCommand.

const (
	// maxHeaderLine bounds the runner's first line; a real one is under 150 bytes.
	maxHeaderLine = 512
	// maxListedJobs bounds the jobs a listing returns, the newest kept: more than
	// anyone reads, and far more than run at once.
	maxListedJobs = 1000
	// maxListedCommand is the bytes of a command a listing keeps (the runner stores 300).
	maxListedCommand = 200
	// listLineMax bounds one listing line: the fields and the runner's preview of 300
	// characters (up to 1200 bytes in a UTF-8 locale).
	listLineMax = 2048
	// listOutputMax bounds the bytes of a listing read from the container.
	listOutputMax = 4 << 20
	// maxRanMs bounds a job's running time in a header: ten years in milliseconds.
	maxRanMs = 10 * 366 * 24 * 3600 * 1000
	// maxFieldNumber bounds every number in a header (sizes, offsets, line counts):
	// far beyond any disk, and far from overflowing when added.
	maxFieldNumber = 1 << 50
)

// errBadAnswer is the error for an answer of the runner that is not well formed.
var errBadAnswer = errors.New("unexpected answer from the job runner")

func badAnswer(line []byte) error {
	return fmt.Errorf("%w: %q", errBadAnswer, human.Clip(string(line[:min(len(line), 200)]), 200))
}

// parseHeader reads the runner's first line (see jobs.sh): "MCPJOB1 <state>" and, for
// done, running and lost, thirteen fields more; for peek, the two file sizes; for oldbash,
// the bash version. Every field is checked; anything else is an error. It allocates
// no more than a few hundred bytes, whatever line holds.
func parseHeader(line []byte) (header, error) {
	var h header
	if len(line) > maxHeaderLine {
		return h, badAnswer(line)
	}
	var f [16][]byte
	n := 0
	for rest := line; ; n++ {
		if n == len(f) {
			return h, badAnswer(line)
		}
		i := bytes.IndexByte(rest, ' ')
		if i < 0 {
			f[n] = rest
			n++
			break
		}
		f[n], rest = rest[:i], rest[i+1:]
	}
	if n < 2 || string(f[0]) != "MCPJOB1" {
		return h, badAnswer(line)
	}
	switch string(f[1]) {
	case "done", "running", "lost":
		h.state = string(f[1])
	case "unknown", "notinteractive", "nocwd", "taken", "inputwaiting", "notty":
		if n != 2 {
			return h, badAnswer(line)
		}
		h.state = string(f[1])
		return h, nil
	case "oldbash":
		if n != 3 || !bashVersion(f[2]) {
			return h, badAnswer(line)
		}
		h.state, h.extra = "oldbash", string(f[2])
		return h, nil
	case "peek":
		var ok1, ok2 bool
		h.outSize, ok1 = fieldNumber(f[2], false)
		h.errSize, ok2 = fieldNumber(f[3], false)
		if n != 4 || !ok1 || !ok2 {
			return h, badAnswer(line)
		}
		h.state = "peek"
		return h, nil
	default:
		return h, badAnswer(line)
	}
	if n != 15 {
		return h, badAnswer(line)
	}
	ok := true
	num := func(b []byte, dash bool) int64 {
		v, good := fieldNumber(b, dash)
		ok = ok && good
		return v
	}
	exit := num(f[2], true)
	h.exit = int(exit)
	h.outSize, h.errSize = num(f[3], false), num(f[4], false)
	h.outFrom, h.errFrom = num(f[5], false), num(f[6], false)
	h.outSent, h.errSent = num(f[7], false), num(f[8], false)
	h.outLines, h.errLines = num(f[9], true), num(f[10], true)
	h.outLine, h.errLine = num(f[11], true), num(f[12], true)
	h.ranMs = num(f[13], true)
	// An exit status only once done; what was sent lies inside the files.
	ok = ok && (exit >= 0) == (h.state == "done") && exit <= 255 &&
		h.outFrom <= h.outSize && h.errFrom <= h.errSize &&
		h.outSent <= h.outSize-h.outFrom && h.errSent <= h.errSize-h.errFrom &&
		h.outLine != 0 && h.errLine != 0 && h.ranMs <= maxRanMs
	if !ok || !h.parseFlags(f[14]) {
		return header{}, badAnswer(line)
	}
	return h, nil
}

// parseFlags reads the flags field: "-", or known flags each ended by a comma.
func (h *header) parseFlags(b []byte) bool {
	if string(b) == "-" {
		return true
	}
	if len(b) == 0 || b[len(b)-1] != ',' {
		return false
	}
	for _, fl := range bytes.Split(b[:len(b)-1], []byte{','}) {
		switch {
		case string(fl) == "timedout":
			h.timedOut = true
		case string(fl) == "killed":
			h.killed = true
		case string(fl) == "cancelled":
			h.cancelled = true
		case string(fl) == "inputwaiting":
			h.inputWaiting = true
		case string(fl) == "inputsent":
			h.inputSent = true
		case bytes.HasPrefix(fl, []byte("bg:")):
			if !h.parseBackground(fl[len("bg:"):]) {
				return false
			}
		case bytes.HasPrefix(fl, []byte("held:")):
			pid := fl[len("held:"):]
			if _, ok := fieldNumber(pid, false); !ok || len(pid) > 10 {
				return false
			}
			h.held = string(pid)
		default:
			return false
		}
	}
	return true
}

// maxBackgroundCommand bounds the bytes of a background process's command line in a
// header: the runner sends at most 80, hex-encoded.
const maxBackgroundCommand = 80

// parseBackground reads the flag "bg:<job id>:<pid>:<hex of its command line>".
func (h *header) parseBackground(b []byte) bool {
	f := bytes.SplitN(b, []byte{':'}, 3)
	if len(f) != 3 || !validJobID(f[0]) || len(f[1]) > 10 || len(f[2]) > 2*maxBackgroundCommand {
		return false
	}
	if _, ok := fieldNumber(f[1], false); !ok {
		return false
	}
	cmd := make([]byte, hex.DecodedLen(len(f[2])))
	if _, err := hex.Decode(cmd, f[2]); err != nil {
		return false
	}
	h.bgJob, h.bgPid, h.bgCmd = string(f[0]), string(f[1]), printable(cmd)
	return true
}

// printable returns b as valid UTF-8 without control characters (each becomes a
// space) and without spaces at either end.
func printable(b []byte) string {
	s := strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(string(trimIncompleteEnd(b)), "\uFFFD"))
	return strings.TrimSpace(s)
}

// fieldNumber reads a decimal number of at most maxFieldNumber, or "-" (as -1) when
// dash allows it. Nothing else: no sign, no spaces, no leading zeros beyond "0".
func fieldNumber(b []byte, dash bool) (int64, bool) {
	if dash && string(b) == "-" {
		return -1, true
	}
	if len(b) == 0 || len(b) > 16 || (len(b) > 1 && b[0] == '0') {
		return 0, false
	}
	var v int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	return v, v <= maxFieldNumber
}

// bashVersion reports whether b is a version such as 5.0: two numbers of up to three
// digits.
func bashVersion(b []byte) bool {
	major, minor, ok := bytes.Cut(b, []byte{'.'})
	_, ok1 := fieldNumber(major, false)
	_, ok2 := fieldNumber(minor, false)
	return ok && ok1 && ok2 && len(major) <= 3 && len(minor) <= 3
}

// parseJobList reads the runner's listing: one line per job, "JOB <id> <state>
// <exit> <start> <timeout s> <interactive> <why killed> <command>". It returns the newest maxJobs
// well-formed jobs, oldest first, each command cut to maxCommand bytes (and marked
// with "…"); lines that are too long or not well formed are left out. Its memory
// depends on maxJobs and maxCommand, not on the size of out. An old bash in the
// container answers with its header instead, which is the error ErrOldBash.
func parseJobList(out []byte, maxJobs, maxCommand int) ([]boxapi.JobInfo, error) {
	if bytes.HasPrefix(out, []byte("MCPJOB1 ")) {
		line, _, _ := bytes.Cut(out, []byte{'\n'})
		h, err := parseHeader(line)
		if err != nil {
			return nil, err
		}
		return nil, scriptError(h, "")
	}
	var jobs []boxapi.JobInfo
	// From the end: the newest jobs are the ones to keep.
	for end := len(out); end > 0 && len(jobs) < maxJobs; {
		start := bytes.LastIndexByte(out[:end-1], '\n') + 1
		line := out[start:end]
		end = start
		line = bytes.TrimSuffix(line, []byte{'\n'})
		if len(line) > listLineMax {
			continue
		}
		if j, ok := parseJobLine(line, maxCommand); ok {
			if jobs == nil {
				jobs = make([]boxapi.JobInfo, 0, min(maxJobs, 64))
			}
			jobs = append(jobs, j)
		}
	}
	for i, k := 0, len(jobs)-1; i < k; i, k = i+1, k-1 {
		jobs[i], jobs[k] = jobs[k], jobs[i]
	}
	return jobs, nil
}

// parseJobLine reads one listing line; see parseJobList.
func parseJobLine(line []byte, maxCommand int) (boxapi.JobInfo, bool) {
	var f [9][]byte
	rest := line
	for n := 0; n < 8; n++ {
		i := bytes.IndexByte(rest, ' ')
		if i < 0 {
			if n < 7 {
				return boxapi.JobInfo{}, false
			}
			f[n], rest = rest, nil
			break
		}
		f[n], rest = rest[:i], rest[i+1:]
	}
	f[8] = rest
	if string(f[0]) != "JOB" || !validJobID(f[1]) {
		return boxapi.JobInfo{}, false
	}
	j := boxapi.JobInfo{ExitCode: -1}
	switch string(f[2]) {
	case "running":
		j.State = "running"
	case "done":
		j.State = "done"
	case "lost":
		j.State = "lost"
	default:
		return boxapi.JobInfo{}, false
	}
	exit, ok := fieldNumber(f[3], true)
	if !ok || (exit >= 0) != (j.State == "done") || exit > 255 {
		return boxapi.JobInfo{}, false
	}
	j.ExitCode = int(exit)
	start, ok := fieldNumber(f[4], false)
	if !ok || start > 1<<40 {
		return boxapi.JobInfo{}, false
	}
	j.Started = time.Unix(start, 0).UTC()
	if j.Timeout, ok = parseSeconds(f[5]); !ok {
		return boxapi.JobInfo{}, false
	}
	switch string(f[6]) {
	case "0":
	case "1":
		j.Interactive = true
	default:
		return boxapi.JobInfo{}, false
	}
	switch string(f[7]) {
	case "-":
	case "timedout":
		j.KilledBy = boxapi.KilledByTimeout
	case "killed":
		j.KilledBy = boxapi.KilledByJobKill
	case "cancelled":
		j.KilledBy = boxapi.KilledByClient
	default:
		return boxapi.JobInfo{}, false
	}
	j.ID = string(f[1])
	cmd := f[8]
	cut := len(cmd) > maxCommand
	if cut {
		cmd = trimIncompleteEnd(cmd[:maxCommand])
	}
	j.Command = strings.ToValidUTF8(string(cmd), "\uFFFD")
	if cut {
		j.Command += "…"
	}
	return j, true
}

// validJobID is ValidJobID for bytes: j and 12 lowercase hex digits.
func validJobID(b []byte) bool { return boxapi.ValidJobID(b) }

// parseSeconds reads a timeout as the runner stores it ("300.000"): up to seven digits
// of seconds and up to three of a fraction.
func parseSeconds(b []byte) (time.Duration, bool) {
	whole, frac, _ := bytes.Cut(b, []byte{'.'})
	if len(whole) > 7 || len(frac) > 3 {
		return 0, false
	}
	s, ok := fieldNumber(whole, false)
	if !ok {
		return 0, false
	}
	d := time.Duration(s) * time.Second
	unit := 100 * time.Millisecond
	for _, c := range frac {
		if c < '0' || c > '9' {
			return 0, false
		}
		d += time.Duration(c-'0') * unit
		unit /= 10
	}
	return d, true
}

// appendCapped appends p to b, keeping at most limit bytes in all. It grows b by
// doubling up to limit, so what it allocates over a whole stream stays under twice
// limit plus a little.
func appendCapped(b, p []byte, limit int) []byte {
	p = p[:max(0, min(len(p), limit-len(b)))]
	if len(p) == 0 {
		return b
	}
	if len(b)+len(p) > cap(b) {
		nb := make([]byte, len(b), min(limit, max(2*cap(b), len(b)+len(p), 512)))
		copy(nb, b)
		b = nb
	}
	return append(b, p...)
}
