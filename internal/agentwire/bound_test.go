package agentwire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// boundPair connects a client session, whose handler hands the streams the agent opens
// to accepted, to an agent session over pipes. The agent's first stream ("who") hands
// the test the agent's session, so the test can write raw frames on it; a "hold"
// stream waits until the session ends; any other is echoed.
func boundPair(t *testing.T) (cs, as *Session, accepted chan *Stream) {
	t.Helper()
	cr, aw := io.Pipe() // agent → client
	ar, cw := io.Pipe() // client → agent
	agentSess := make(chan *Session, 1)
	go func() {
		Serve(bufio.NewReaderSize(ar, 64<<10), aw, HelloMsg{}, func(st *Stream) {
			switch req := st.Request(); string(req) {
			case "who":
				agentSess <- st.Session()
				st.Exit(0)
			case "hold":
				<-st.Session().Done()
			default:
				echoReq(st, req)
			}
		})
		aw.Close()
	}()
	accepted = make(chan *Stream, 2*MaxAgentStreams)
	cs, err := Client(bufio.NewReaderSize(cr, 64<<10), cw, closers{cr, cw}, HelloMsg{}, func(st *Stream) {
		st.Request()
		accepted <- st
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close(); ar.Close() })
	who, err := cs.Open([]byte("who"))
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, who)
	return cs, <-agentSess, accepted
}

// flood writes rounds of 1-byte Data frames on the streams ids, per bytes each
// (alternating channels on those alt marks), in batches that bypass the agent's own
// flow control, until stop is set; it never exceeds a stream's window.
func flood(as *Session, ids []uint32, alt map[uint32]bool, per int, stop *atomic.Bool) {
	const round = 1024
	var buf []byte
	for sent := 0; sent < per && !stop.Load(); sent += round {
		buf = buf[:0]
		for _, id := range ids {
			for j := 0; j < round; j++ {
				ch := Stdout
				if alt[id] && j%2 == 1 {
					ch = Stderr
				}
				buf = appendFrame(buf, Data, id, []byte{ch, 'x'})
			}
		}
		as.wmu.Lock()
		_, err := as.w.Write(buf)
		as.wmu.Unlock()
		if err != nil {
			return
		}
	}
}

func heapInuse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// A hostile agent sending 1-byte frames (some alternating channels) on as many streams
// as it can open, and on streams Caddy opened with raised windows, makes Caddy hold no
// more than the session's budget: past it Caddy stops reading. Where each frame once
// cost a queued chunk, the same attack held about 45 bytes of heap per byte of window
// (300 streams of 256 KiB and 4 of 16 MiB: about 6 GB). Once Caddy's readers let go,
// the session carries an honest stream again.
func TestHostileTinyFramesBounded(t *testing.T) {
	cs, as, accepted := boundPair(t)
	var raised []*Stream
	for i := 0; i < 4; i++ {
		st, err := cs.Open([]byte("hold"))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.SetReceiveWindow(MaxWindow); err != nil {
			t.Fatal(err)
		}
		raised = append(raised, st)
	}
	heap0 := heapInuse()

	// 300 streams opened by the agent: past MaxAgentStreams they are refused.
	var ids []uint32
	alt := map[uint32]bool{}
	for i := 0; i < 300; i++ {
		st, err := as.Open([]byte("accept"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, st.id)
		alt[st.id] = i%2 == 1
	}
	for _, st := range raised {
		ids = append(ids, st.id)
		alt[st.id] = true
	}
	var stop atomic.Bool
	flooded := make(chan struct{})
	go func() {
		defer close(flooded)
		flood(as, ids, alt, InitialWindow, &stop)
	}()

	// The budget fills and Caddy stops reading.
	deadline := time.Now().Add(20 * time.Second)
	for !cs.waiting.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("Caddy never stopped reading; it holds %d bytes", cs.held.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // let anything in flight land
	held := cs.held.Load()
	grew := int64(heapInuse()) - int64(heap0)
	t.Logf("under attack: Caddy holds %.1f MiB by its count; the heap grew by %.1f MiB", float64(held)/(1<<20), float64(grew)/(1<<20))
	if held > MaxHeld+2*MaxFromAgent {
		t.Errorf("the session holds %d bytes, more than its budget %d", held, MaxHeld)
	}
	if grew > 2*MaxHeld {
		t.Errorf("the heap grew by %d MiB under attack, more than twice the budget", grew>>20)
	}
	cs.mu.Lock()
	open := cs.peerOpen
	cs.mu.Unlock()
	if open > MaxAgentStreams || len(accepted) > MaxAgentStreams {
		t.Errorf("%d streams opened by the agent are open (%d accepted), more than %d", open, len(accepted), MaxAgentStreams)
	}

	// Caddy's readers let go: the session drains, and an honest stream works.
	stop.Store(true)
	close(accepted)
	for st := range accepted {
		st.Close()
	}
	for _, st := range raised {
		st.Close()
	}
	select {
	case <-flooded:
	case <-time.After(20 * time.Second):
		t.Fatal("the session did not resume reading once its streams were closed")
	}
	st, err := cs.Open([]byte("still "))
	if err != nil {
		t.Fatal(err)
	}
	go func() { st.Write(Stdin, []byte("here")); st.CloseChannel(Stdin) }()
	if got := readAll(t, st); string(got) != "still here" {
		t.Fatalf("honest stream got %q", got)
	}
	if err := cs.Err(); err != nil {
		t.Fatalf("session ended: %v", err)
	}
	if h := cs.held.Load(); h != 0 {
		t.Errorf("the session still counts %d bytes held with every stream closed", h)
	}
}

// 1-byte frames of one channel are queued contiguously: a window's worth costs about
// its bytes, not a chunk each.
func TestTinyFramesQueuedContiguously(t *testing.T) {
	cs, as, accepted := boundPair(t)
	const streams, per = 32, 32 << 10
	var ids []uint32
	for i := 0; i < streams; i++ {
		st, err := as.Open([]byte("accept"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, st.id)
	}
	heap0 := heapInuse()
	var stop atomic.Bool
	flood(as, ids, nil, per, &stop)
	// The pipe hands frames over synchronously: the last is read; wait for its queueing.
	want := int64(streams*per) + int64(streams)*chunkCost
	for i := 0; cs.held.Load() < int64(streams*per) && i < 500; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	grew := int64(heapInuse()) - int64(heap0)
	held := cs.held.Load()
	t.Logf("%d streams of %d 1-byte frames: held %.1f MiB by count, heap grew %.1f MiB (%.2f bytes per byte; a chunk per frame was about 45)",
		streams, per, float64(held)/(1<<20), float64(grew)/(1<<20), float64(grew)/float64(streams*per))
	if held < int64(streams*per) || held > 2*want {
		t.Errorf("held %d, want between %d and %d", held, streams*per, 2*want)
	}
	if grew > 3*int64(streams*per) {
		t.Errorf("the heap grew by %d bytes for %d bytes of frames", grew, streams*per)
	}
	for len(accepted) > 0 {
		st := <-accepted
		n := 0
		for n < per {
			c, err := st.ReadChunk()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(c.Data, bytes.Repeat([]byte("x"), len(c.Data))) {
				t.Fatal("bytes changed on the way")
			}
			n += len(c.Data)
		}
		st.Close()
	}
	if h := cs.held.Load(); h != 0 {
		t.Errorf("%d bytes still counted held after every stream was read", h)
	}
}

// Bulk downloads whose windows add up to more than the budget, read slowly, are slowed
// down, never ended: every byte arrives and the session lives on.
func TestSlowBulkReadersNotKilled(t *testing.T) {
	const streams, size = 3, 24 << 20
	s, stop := pair(t, func(st *Stream) {
		st.Request()
		buf := make([]byte, 32<<10)
		for n := 0; n < size; n += len(buf) {
			if _, err := st.Write(Stdout, buf); err != nil {
				return
			}
		}
		st.Exit(0)
	})
	defer stop()
	var sts []*Stream
	for i := 0; i < streams; i++ {
		st, err := s.Open([]byte("bulk"))
		if err != nil {
			t.Fatal(err)
		}
		st.SetReceiveWindow(MaxWindow)
		sts = append(sts, st)
	}
	time.Sleep(300 * time.Millisecond) // nobody reads: the windows fill up to the budget
	if h := s.held.Load(); h > MaxHeld+2*MaxFromAgent {
		t.Fatalf("holds %d bytes with no reader, more than the budget", h)
	}
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for _, st := range sts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for {
				c, err := st.ReadChunk()
				if err == io.EOF {
					break
				}
				if err != nil {
					errs <- err
					return
				}
				n += len(c.Data)
				if n%(1<<20) < len(c.Data) {
					time.Sleep(time.Millisecond) // a slow reader
				}
			}
			if n != size {
				errs <- errors.New("short read")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("session ended: %v", err)
	}
	if h := s.held.Load(); h != 0 {
		t.Errorf("%d bytes still counted held", h)
	}
}

// A writer whose peer never reads waits for credit until its write deadline, not
// forever.
func TestWriteDeadline(t *testing.T) {
	s, stop := pair(t, func(st *Stream) { <-st.Session().Done() })
	defer stop()
	st, err := s.Open([]byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	st.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	start := time.Now()
	n, err := st.Write(Stdin, make([]byte, 2*InitialWindow))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Write returned %v after %d bytes, want os.ErrDeadlineExceeded", err, n)
	}
	if n != InitialWindow || time.Since(start) > 5*time.Second {
		t.Fatalf("wrote %d bytes in %v, want the window's %d at the deadline", n, time.Since(start), InitialWindow)
	}
	st.SetWriteDeadline(time.Time{})
	st.Close()
}

// Stalled bulk readers cannot stop the session's other streams: file streams raised to
// FileWindow and never read, more than the budget holds, leave a command's output
// flowing and every control frame arriving. Windows are granted within the budget, so
// the read loop never waits for an honest agent. Before, four such streams starved every
// other stream of credit and eight stopped the read loop altogether.
func TestStalledDownloadsDoNotStopOthers(t *testing.T) {
	const stalled, file, out = 10, 6 << 20, 1 << 20
	s, stop := pair(t, func(st *Stream) {
		n := out
		if string(st.Request()) == "file" {
			n = file
		}
		if _, err := st.Write(Stdout, make([]byte, n)); err != nil {
			return
		}
		st.Exit(0)
	})
	defer stop()
	var files []*Stream
	for i := 0; i < stalled; i++ {
		st, err := s.Open([]byte("file"))
		if err != nil {
			t.Fatal(err)
		}
		st.SetReceiveWindow(FileWindow)
		files = append(files, st)
	}
	time.Sleep(300 * time.Millisecond) // nobody reads: the file windows fill
	for round := 0; round < 3; round++ {
		cmd, err := s.Open([]byte("cmd"))
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan int, 1)
		go func() {
			n := 0
			for {
				c, err := cmd.ReadChunk()
				if err != nil {
					break
				}
				n += len(c.Data)
			}
			got <- n
		}()
		select {
		case n := <-got:
			if code, ok := cmd.Status(); n != out || !ok || code != 0 {
				t.Fatalf("the command's output: %d bytes, exit %d %v; want %d bytes and its exit", n, code, ok, out)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the command's output stopped beside %d stalled downloads (held %.1f MiB, read loop waiting: %v)",
				round, stalled, float64(s.Held())/(1<<20), s.waiting.Load())
		}
	}
	held, committed := s.Held(), s.Committed()
	t.Logf("%d stalled downloads: held %.1f MiB, windows granted %.1f MiB of a %d MiB budget", stalled, float64(held)/(1<<20), float64(committed)/(1<<20), MaxHeld>>20)
	if held > MaxHeld || committed > MaxHeld {
		t.Errorf("held %d, windows %d: more than the budget %d", held, committed, MaxHeld)
	}
	// The stalled downloads still complete once read.
	for _, st := range files {
		if n := len(readAll(t, st)); n != file {
			t.Fatalf("a download got %d bytes, want %d", n, file)
		}
	}
	if h, c := s.Held(), s.Committed(); h != 0 || c != 0 {
		t.Errorf("with every stream read to its end, %d bytes held and %d committed", h, c)
	}
}

// New streams beyond what the budget's windows allow wait for room, and past openWait
// are refused with an error that says what to do, not granted windows the session could
// not hold; a stream that closes makes room, for a waiting Open too.
func TestOpenWithinBudget(t *testing.T) {
	defer func(d time.Duration) { openWait = d }(openWait)
	openWait = 100 * time.Millisecond
	s, stop := pair(t, func(st *Stream) { <-st.Done() })
	defer stop()
	var sts []*Stream
	var err error
	for i := 0; i < 2*MaxHeld/InitialWindow; i++ {
		var st *Stream
		if st, err = s.Open([]byte("x")); err != nil {
			break
		}
		sts = append(sts, st)
	}
	if err == nil || len(sts) != MaxHeld/InitialWindow {
		t.Fatalf("opened %d streams (last error %v), want %d then an error", len(sts), err, MaxHeld/InitialWindow)
	}
	time.AfterFunc(50*time.Millisecond, func() { sts[0].Close() })
	st, err := s.Open([]byte("x"))
	if err != nil {
		t.Fatalf("no room after a stream closed: %v", err)
	}
	st.Close()
	for _, st := range sts[1:] {
		st.Close()
	}
	if c := s.Committed(); c != 0 {
		t.Errorf("%d bytes of windows still counted with every stream closed", c)
	}
}
