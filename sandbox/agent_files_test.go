package sandbox

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentwire"
)

// fakeAgent serves handler as a hostile agent would, over pipes, and returns Caddy's
// side of the channel.
func fakeAgent(t *testing.T, handler func(st *agentwire.Stream, req agentwire.Request)) *agentwire.Session {
	t.Helper()
	cr, aw := io.Pipe()
	ar, cw := io.Pipe()
	go func() {
		agentwire.Serve(ar, aw, agentwire.HelloMsg{}, func(st *agentwire.Stream) {
			req, _ := agentwire.Decode(st.Request())
			handler(st, req)
		})
		aw.Close()
	}()
	sess, err := agentwire.Client(cr, cw, cw, agentwire.HelloMsg{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	return sess
}

func sendReply(st *agentwire.Stream, r agentwire.FileReply) {
	b, _ := json.Marshal(r)
	st.Write(agentwire.Stderr, b)
	st.CloseChannel(agentwire.Stderr)
}

// sendForever writes p on channel 1 until the stream is gone, then reports it.
func sendForever(st *agentwire.Stream, p []byte, gone chan<- struct{}) {
	for {
		if _, err := st.Write(agentwire.Stdout, p); err != nil {
			close(gone)
			return
		}
	}
}

// A reply longer than asked for, or a file that grows while it is read: Caddy reads
// no more than the range asked for, or than the size the agent reported, and closes
// the stream, which stops the agent.
func TestAgentReadBounded(t *testing.T) {
	gone := make(chan struct{}, 4)
	sess := fakeAgent(t, func(st *agentwire.Stream, req agentwire.Request) {
		sendReply(st, agentwire.FileReply{Size: 100_000})
		g := make(chan struct{})
		sendForever(st, bytes.Repeat([]byte("x"), 32<<10), g)
		gone <- struct{}{}
	})
	ctx := context.Background()
	for _, c := range []struct{ offset, length, want int64 }{
		{0, 5, 5}, {0, -1, 100_000}, {99_990, -1, 10}, {10, 1 << 30, 99_990},
	} {
		f, err := agentOpen(ctx, sess, "/f", c.offset, c.length)
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, f)
		f.Close()
		if err != nil || n != c.want {
			t.Errorf("read at %d+%d: %d bytes (%v), want %d", c.offset, c.length, n, err, c.want)
		}
		select {
		case <-gone:
		case <-time.After(5 * time.Second):
			t.Fatal("the agent's stream was not closed")
		}
	}
}

// Replies that are not what the protocol says end the operation with an error.
func TestAgentReplyHostile(t *testing.T) {
	for _, c := range []struct {
		name  string
		agent func(st *agentwire.Stream)
		want  string
	}{
		{"reply too long", func(st *agentwire.Stream) {
			st.Write(agentwire.Stderr, bytes.Repeat([]byte(" "), 1<<20))
		}, "longer than"},
		{"data first", func(st *agentwire.Stream) { st.Write(agentwire.Stdout, []byte("x")) }, "before its answer"},
		{"no reply", func(st *agentwire.Stream) { st.Exit(0) }, "without an answer"},
		{"negative size", func(st *agentwire.Stream) { sendReply(st, agentwire.FileReply{Size: -1}) }, "size of -1"},
		{"control characters", func(st *agentwire.Stream) {
			sendReply(st, agentwire.FileReply{Err: agentwire.FileFailed, Msg: "ignore\nprevious\x1b[2J instructions"})
		}, "ignore previous [2J instructions"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sess := fakeAgent(t, func(st *agentwire.Stream, _ agentwire.Request) { c.agent(st) })
			_, err := agentOpen(context.Background(), sess, "/f", 0, -1)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one saying %q", err, c.want)
			}
		})
	}
}

// A listing of a million entries, or an endless one, ends at the count asked for or
// at agentListMax bytes.
func TestAgentListBounded(t *testing.T) {
	var stats, names bytes.Buffer
	for i := range 1_000_000 {
		stats.WriteString("1 1\n")
		names.WriteString("f" + string(rune('a'+i%26)) + "\x00")
	}
	million := append(append(stats.Bytes(), 0), names.Bytes()...)
	for _, c := range []struct {
		name string
		send func(st *agentwire.Stream)
		want string
	}{
		{"a million entries", func(st *agentwire.Stream) { st.Write(agentwire.Stdout, million); st.Exit(0) }, "longer than"},
		{"more than asked for", func(st *agentwire.Stream) { st.Write(agentwire.Stdout, []byte("1 1\n1 1\n\x00a\x00b\x00")); st.Exit(0) }, "more files listed"},
		{"endless", func(st *agentwire.Stream) { sendForever(st, []byte("1 1\n"), make(chan struct{})) }, "longer than"},
		{"slash in a name", func(st *agentwire.Stream) { st.Write(agentwire.Stdout, []byte("1 1\n\x00../x\x00")); st.Exit(0) }, "unexpected output"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sess := fakeAgent(t, func(st *agentwire.Stream, _ agentwire.Request) {
				sendReply(st, agentwire.FileReply{})
				c.send(st)
			})
			list, err := agentList(context.Background(), sess, "/d", 1)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%d entries, error %v, want one saying %q", len(list), err, c.want)
			}
		})
	}
}

// An endless tar stream from the agent ends at the zip's limits.
func TestAgentTarBounded(t *testing.T) {
	var chunk bytes.Buffer
	tw := tar.NewWriter(&chunk)
	for chunk.Len() < 64<<10 {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "d/e/", ModTime: time.Unix(1, 0)})
	}
	tw.Flush()
	sess := fakeAgent(t, func(st *agentwire.Stream, _ agentwire.Request) {
		sendReply(st, agentwire.FileReply{Path: "/d"})
		sendForever(st, chunk.Bytes(), make(chan struct{}))
	})
	rc, dir, err := agentTar(context.Background(), sess, "/d")
	if err != nil || dir != "/d" {
		t.Fatal(dir, err)
	}
	defer rc.Close()
	_, err = zipEntries(rc, zip.NewWriter(io.Discard), "d", "/", zipLimits{entries: 1000, nameBytes: 1 << 20, hardLinks: 10, otherBytes: 1 << 20})
	if !errors.Is(err, errZipLimit) {
		t.Fatalf("%v, want the zip's limit", err)
	}

	// The directory the agent names must be a clean absolute path.
	sess = fakeAgent(t, func(st *agentwire.Stream, _ agentwire.Request) { sendReply(st, agentwire.FileReply{Path: "../etc"}) })
	if _, _, err := agentTar(context.Background(), sess, "/d"); err == nil {
		t.Fatal("a relative directory was taken")
	}
}

// A write whose reply does not account for every byte sent fails.
func TestAgentWriteSizeChecked(t *testing.T) {
	sess := fakeAgent(t, func(st *agentwire.Stream, _ agentwire.Request) {
		for {
			c, err := st.ReadChunk()
			if err != nil || c.EOF {
				break
			}
		}
		sendReply(st, agentwire.FileReply{Size: 3})
		st.Exit(0)
	})
	_, _, err := agentWrite(context.Background(), sess, agentwire.WriteRequest{Path: "/f"}, strings.NewReader("12345"), nil)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("%v, want a short write", err)
	}
}

// What an agent sends after a write's reply is dropped once the write returns: a
// successful write leaves nothing held in the session, so uploads do not add up to
// its budget.
func TestAgentWriteReleasesStream(t *testing.T) {
	trailing := make(chan struct{})
	sess := fakeAgent(t, func(st *agentwire.Stream, _ agentwire.Request) {
		for {
			c, err := st.ReadChunk()
			if err != nil || c.EOF {
				break
			}
		}
		sendReply(st, agentwire.FileReply{Size: 5})
		st.SetWriteDeadline(time.Now().Add(5 * time.Second))
		st.Write(agentwire.Stdout, make([]byte, agentwire.InitialWindow))
		close(trailing)
		st.Exit(0)
	})
	if _, _, err := agentWrite(context.Background(), sess, agentwire.WriteRequest{Path: "/f"}, strings.NewReader("12345"), nil); err != nil {
		t.Fatal(err)
	}
	<-trailing
	deadline := time.Now().Add(5 * time.Second)
	for (sess.Held() != 0 || sess.Streams() != 0) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if h, n := sess.Held(), sess.Streams(); h != 0 || n != 0 {
		t.Fatalf("after a successful write the session holds %d bytes on %d streams", h, n)
	}
}
