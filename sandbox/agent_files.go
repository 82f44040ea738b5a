// Files over the agent's channel: each read, write, stat, listing or directory archive
// is a stream, with no Docker exec and no archive API (which locks the container while
// it streams). What the agent answers is read as hostile: the reply is bounded, a read
// stops at the length asked for, a listing at its count and size.

package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"path"
	"strings"
	"time"
	"unicode"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentwire"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
)

// agentFile opens a file operation on the agent and, unless it writes, reads its
// reply. The stream is closed when ctx ends; the returned stop undoes that.
func agentFile(ctx context.Context, sess *agentwire.Session, r agentwire.Request) (*agentwire.Stream, agentwire.FileReply, func() bool, error) {
	b, err := agentwire.Encode(r)
	if err != nil {
		return nil, agentwire.FileReply{}, nil, err
	}
	st, err := sess.Open(b)
	if err != nil {
		return nil, agentwire.FileReply{}, nil, err
	}
	stop := context.AfterFunc(ctx, func() { st.Close() })
	if op := r.Op(); op == agentwire.OpRead || op == agentwire.OpTar {
		_ = st.SetReceiveWindow(agentwire.FileWindow)
	}
	if r.Op() == agentwire.OpWrite {
		return st, agentwire.FileReply{}, stop, nil
	}
	rep, err := readReply(st)
	if err != nil {
		stop()
		st.Close()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, rep, nil, err
	}
	return st, rep, stop, nil
}

// readReply reads a file operation's reply: at most MaxFileReply bytes on channel 2,
// ended by EOF, before anything else.
func readReply(st *agentwire.Stream) (agentwire.FileReply, error) {
	var rep agentwire.FileReply
	var b []byte
	for {
		c, err := st.ReadChunk()
		if err == io.EOF {
			return rep, errors.New("the sandbox agent ended the operation without an answer")
		}
		if err != nil {
			return rep, err
		}
		if c.Ch != agentwire.Stderr {
			return rep, errors.New("the sandbox agent sent data before its answer")
		}
		if c.EOF {
			break
		}
		if len(b)+len(c.Data) > agentwire.MaxFileReply {
			return rep, fmt.Errorf("the sandbox agent's answer is longer than %d bytes", agentwire.MaxFileReply)
		}
		b = append(b, c.Data...)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		return rep, fmt.Errorf("the sandbox agent's answer: %w", err)
	}
	if rep.Size < 0 {
		return rep, fmt.Errorf("the sandbox agent answered a size of %d", rep.Size)
	}
	return rep, nil
}

// replyInfo is what a reply says of the file at p.
func replyInfo(p string, rep agentwire.FileReply) boxapi.FileInfo {
	return boxapi.FileInfo{Path: p, Name: path.Base(p), Size: rep.Size, ModTime: time.Unix(0, rep.MTime), Mode: fs.FileMode(rep.Mode)}
}

// replyErr is a reply's error in the sandbox's terms, about the path p.
func replyErr(p string, rep agentwire.FileReply) error {
	msg := agentMessage(rep.Msg)
	switch rep.Err {
	case "":
		return nil
	case agentwire.FileNotFound:
		return fmt.Errorf("stat %s: %w", p, boxapi.ErrNotFound)
	case agentwire.FileIsDir:
		return fmt.Errorf("%s: %w", p, boxapi.ErrIsDir)
	case agentwire.FileNotRegular:
		if fs.FileMode(rep.Mode).Type() != 0 {
			return fmt.Errorf("%s: %w", p, boxapi.ErrNotRegular)
		}
		return fmt.Errorf("%s: %w (it does not lead to a file: a symbolic link loop or a broken path)", p, boxapi.ErrNotRegular)
	case agentwire.FileNotDir:
		return fmt.Errorf("%s is not a directory", p)
	case agentwire.FileTooLarge:
		return fmt.Errorf("%s: %w (%s)", p, boxapi.ErrTooLarge, msg)
	case agentwire.FileExists:
		return fmt.Errorf("%s: %w", p, fs.ErrExist)
	case agentwire.FileRange:
		return fmt.Errorf("opening %s: %s", p, msg)
	}
	return fmt.Errorf("%s in the sandbox: %s", p, msg)
}

// agentMessage makes the agent's words about an error short and printable.
func agentMessage(m string) string {
	m = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || isBidiOrInvisible(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(human.Clip(m, 300), "?"))
	return strings.TrimSpace(m)
}

// agentStat describes the file p leads to.
func agentStat(ctx context.Context, sess *agentwire.Session, p string) (boxapi.FileInfo, error) {
	st, rep, stop, err := agentFile(ctx, sess, agentwire.StatRequest{Path: p})
	if err != nil {
		return boxapi.FileInfo{}, fmt.Errorf("stat %s in the sandbox: %w", p, err)
	}
	stop()
	st.Close()
	fi := replyInfo(p, rep)
	if err := replyErr(p, rep); err != nil {
		if rep.Err == agentwire.FileNotFound {
			return boxapi.FileInfo{}, err
		}
		return boxapi.FileInfo{Path: p, Name: path.Base(p)}, err
	}
	return fi, nil
}

// agentOpen streams length bytes (-1: to the end) of the regular file p from offset.
// It reads no more than asked for, nor than the file held when the agent opened it.
func agentOpen(ctx context.Context, sess *agentwire.Session, p string, offset, length int64) (*boxapi.File, error) {
	st, rep, stop, err := agentFile(ctx, sess, agentwire.ReadRequest{Path: p, Offset: offset, Length: length})
	if err != nil {
		return nil, fmt.Errorf("reading %s in the sandbox: %w", p, err)
	}
	fi := replyInfo(p, rep)
	if err := replyErr(p, rep); err != nil {
		stop()
		st.Close()
		return nil, err
	}
	if offset > fi.Size {
		stop()
		st.Close()
		return nil, fmt.Errorf("opening %s: offset %d is beyond the end of the file (%d bytes)", p, offset, fi.Size)
	}
	want := fi.Size - offset
	if length >= 0 {
		want = min(want, length)
	}
	return &boxapi.File{ReadCloser: &agentReader{st: st, left: want, stop: stop}, FileInfo: fi}, nil
}

// agentReader reads channel 1 of a file operation, left bytes at most: past them the
// stream is closed and what more comes is dropped.
type agentReader struct {
	st   *agentwire.Stream
	left int64
	data []byte
	stop func() bool
	err  error
}

func (r *agentReader) Read(p []byte) (int, error) {
	for len(r.data) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if r.left == 0 {
			r.err = io.EOF
			r.st.Close()
			continue
		}
		c, err := r.st.ReadChunk()
		switch {
		case err == io.EOF:
			// The agent ended: with less than asked for when the file shrank.
			if code, ok := r.st.Status(); !ok || code != 0 {
				err = fmt.Errorf("the sandbox agent ended the read with status %d", code)
			}
			r.err = err
			continue
		case err != nil:
			r.err = err
			continue
		}
		if c.Ch != agentwire.Stdout || c.EOF {
			continue
		}
		r.data = c.Data[:min(int64(len(c.Data)), r.left)]
		r.left -= int64(len(r.data))
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func (r *agentReader) Close() error {
	r.stop()
	return r.st.Close()
}

// agentWrite streams body into the file req.Path as req says and returns
// the agent's reply once the file is closed. When body fails, the stream is abandoned
// and, within uploadStepTimeout, the agent has removed a file it created.
func agentWrite(ctx context.Context, sess *agentwire.Session, req agentwire.WriteRequest, body io.Reader, bulk *bulkSocket) (rep agentwire.FileReply, n int64, err error) {
	if bulk != nil {
		req.Socket, req.Token = bulk.path, bulk.token
	}
	st, _, stop, err := agentFile(ctx, sess, req)
	if err != nil {
		return agentwire.FileReply{}, 0, err
	}
	defer stop()
	// Whatever the agent sends after its reply would be held until the session ends.
	defer st.Close()
	defer func() {
		if err == nil {
			return
		}
		// The agent removes what it created once it sees the stream end.
		st.Close()
		t := time.NewTimer(uploadStepTimeout)
		defer t.Stop()
		select {
		case <-st.Done():
		case <-t.C:
		}
	}()
	var werr, rerr error
	if bulk != nil {
		if n, werr, rerr = bulk.send(ctx, st.Done(), body); werr != nil {
			// The agent may have answered why (a full disk); it may also still wait
			// for the bytes, and then this stream's end tells it to give up.
			st.SetReadDeadline(time.Now().Add(directTimeout))
		}
	} else {
		n, werr, rerr = sendFrames(st, body)
	}
	if rerr != nil {
		return agentwire.FileReply{}, n, rerr
	}
	if werr == nil {
		werr = st.CloseChannel(agentwire.Stdin)
		if bulk != nil {
			// The agent has all the bytes: it answers once the file is closed.
			st.SetReadDeadline(time.Now().Add(uploadStepTimeout))
		}
	}
	rep, err = readReply(st)
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		} else if werr != nil && !errors.Is(werr, agentwire.ErrClosed) {
			err = werr
		}
		return rep, n, err
	}
	if err := replyErr(req.Path, rep); err != nil {
		return rep, n, err
	}
	if werr != nil {
		return rep, n, werr
	}
	if rep.Size != n {
		return rep, n, fmt.Errorf("%s holds %d bytes, %d were sent: %w", req.Path, rep.Size, n, io.ErrUnexpectedEOF)
	}
	return rep, n, nil
}

// sendFrames copies body to the stream's channel 0. werr is a failure of the stream,
// rerr one of body.
func sendFrames(st *agentwire.Stream, body io.Reader) (n int64, werr, rerr error) {
	buf := make([]byte, 8*(agentwire.MaxData-1))
	for werr == nil {
		m, err := body.Read(buf)
		if m > 0 {
			_, werr = st.Write(agentwire.Stdin, buf[:m])
			n += int64(m)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return n, werr, err
		}
	}
	return n, werr, nil
}

// agentListMax bounds a listing's bytes as the listing script's output is bounded.
const agentListMax = 4 << 20

// agentList lists up to max regular files of dir.
func agentList(ctx context.Context, sess *agentwire.Session, dir string, max int) ([]boxapi.DirEntry, error) {
	st, rep, stop, err := agentFile(ctx, sess, agentwire.ListRequest{Path: dir, Max: int64(max), Hide: tempPrefix})
	if err != nil {
		return nil, err
	}
	defer stop()
	defer st.Close()
	if err := replyErr(dir, rep); err != nil {
		return nil, err
	}
	r := &agentReader{st: st, left: agentListMax + 1, stop: stop}
	out, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	if len(out) > agentListMax {
		return nil, fmt.Errorf("the listing is longer than %d bytes", agentListMax)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return parseListing(string(out), max)
}

// agentTar streams the directory p (symbolic links to it followed) as a tar stream,
// and returns the directory's real path.
func agentTar(ctx context.Context, sess *agentwire.Session, p string) (io.ReadCloser, string, error) {
	st, rep, stop, err := agentFile(ctx, sess, agentwire.TarRequest{Path: p})
	if err != nil {
		return nil, "", fmt.Errorf("archiving %s in the sandbox: %w", p, err)
	}
	if err := replyErr(p, rep); err != nil {
		stop()
		st.Close()
		return nil, "", err
	}
	if !path.IsAbs(rep.Path) || path.Clean(rep.Path) != rep.Path || len(rep.Path) > maxRealDir {
		stop()
		st.Close()
		return nil, "", fmt.Errorf("archiving %s: the sandbox agent answered the directory %.100q", p, rep.Path)
	}
	return &agentReader{st: st, left: math.MaxInt64, stop: stop}, rep.Path, nil
}

// fileAgent checks the absolute path p, makes sure the container runs and returns
// the agent's channel, or nil for the fallback (Docker's API and execs).
func (s *agentLink) fileAgent(ctx context.Context, p string) (*agentwire.Session, error) {
	if !path.IsAbs(p) {
		return nil, fmt.Errorf("%q: %w", p, boxapi.ErrRelativePath)
	}
	if err := s.sb.Ensure(ctx); err != nil {
		return nil, err
	}
	return s.agentSession(ctx), nil
}

// agentGone reports whether a file operation failed because the agent's channel ended
// before it answered, so the fallback may do it instead.
func agentGone(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && (errors.Is(err, agentwire.ErrLost) || errors.Is(err, agentwire.ErrClosed))
}

// agentUpload streams r into the new file tmp; size (-1: unknown) is the number of
// bytes r must give.
func (s *agentLink) agentUpload(ctx context.Context, sess *agentwire.Session, tmp string, r io.Reader, size int64) (int64, error) {
	var bulk *bulkSocket
	if size < 0 || size >= bulkMin {
		bulk = s.bulkListen(sess)
		defer bulk.Close()
	}
	_, n, err := agentWrite(ctx, sess, agentwire.WriteRequest{Path: tmp, Excl: true}, r, bulk)
	if err == nil && size >= 0 && n != size {
		err = fmt.Errorf("%d bytes of %d came: %w", n, size, io.ErrUnexpectedEOF)
	}
	if err != nil {
		return n, fmt.Errorf("writing into the sandbox: %w", err)
	}
	if bulk != nil {
		s.bulkWrites.Add(1)
	}
	return n, nil
}
