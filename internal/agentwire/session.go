package agentwire

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// HelloMsg is what each side says first.
type HelloMsg struct {
	Version int    `json:"version"`
	PID     int    `json:"pid,omitempty"`   // the agent's pid in the container
	Build   string `json:"build,omitempty"` // the agent's build, for logs
	// Token is the agent's answer on a direct channel (OpChannel): the token Caddy
	// gave it, so Caddy knows which agent dialed.
	Token string `json:"token,omitempty"`
}

// Chunk is what a stream delivers: bytes of a channel, or the end of a channel.
type Chunk struct {
	Ch   byte
	Data []byte
	EOF  bool
}

// Control is a Signal or Resize frame received by the agent.
type Control struct {
	Signal     int // 0 for a resize
	Rows, Cols uint16
}

// ErrClosed is the error of a stream or session closed on this side.
var ErrClosed = errors.New("agent channel closed")

// ErrLost is the error of the streams of a session that ended while they ran; the
// programs they started may still run.
var ErrLost = errors.New("agent channel lost")

// writeTimeout bounds one frame's write on Caddy's side: an agent that stops reading
// ends the session. The agent's writes toward Caddy have no deadline: Caddy is trusted,
// and when it stops reading it applies backpressure on purpose.
var writeTimeout = 10 * time.Second

// maxStreams bounds the streams open at once in each direction (MaxAgentStreams, less,
// for those the agent opens to Caddy).
const maxStreams = 4096

// chunkCost is what a queued piece of a stream costs beyond its bytes, charged against
// MaxHeld: its Chunk in the queue (40 bytes, up to twice that as the queue grows) and
// the rounding of its buffer's allocation.
const chunkCost = 96

// mergeBelow: a Data frame is appended to the stream's last queued piece of the same
// channel while that piece is shorter than this or has room, so tiny frames cost no
// piece each; a bulk frame after a long piece gets a piece of its own, so nothing is
// copied twice.
const mergeBelow = 4 << 10

type deadliner interface{ SetWriteDeadline(time.Time) error }

// Session is one channel between Caddy and an agent.
type Session struct {
	agent  bool // this side is the agent
	maxIn  int
	r      io.Reader
	closer io.Closer

	wmu  sync.Mutex
	w    io.Writer
	wbuf []byte

	mu       sync.Mutex
	streams  map[uint32]*Stream
	next     uint32 // the id of this side's next stream
	lastPeer uint32 // the highest id the peer opened
	peerOpen int    // peer-opened streams not yet ended
	maxPeer  int    // peer-opened streams allowed at once
	err      error
	done     chan struct{}
	handler  func(*Stream)
	peer     HelloMsg

	rbuf []byte // the read loop's frame buffer

	// What is held received and not read (MaxHeld): budget is 0 on the agent's side,
	// which trusts Caddy.
	budget  int64
	held    atomic.Int64
	ended   atomic.Bool // fail has run
	waiting atomic.Bool // the read loop waits for room
	roomMu  sync.Mutex
	room    *sync.Cond // signalled as held falls, and when the session ends
	starved []*Stream  // streams whose credit waits for held to fall below budget/2
	nstarve atomic.Int32
	// committed is what the live streams' windows add up to (under mu): what an
	// honest peer may have queued here at once. New streams and raised windows are
	// granted only within the budget, so an honest peer never makes the read loop
	// wait, however slow the readers.
	committed   int64
	uncommitted *sync.Cond // on mu: signalled as committed falls, and when the session ends
}

func newSession(agent bool, r io.Reader, w io.Writer, closer io.Closer, handler func(*Stream)) *Session {
	s := &Session{agent: agent, r: r, w: w, closer: closer, handler: handler,
		streams: map[uint32]*Stream{}, done: make(chan struct{})}
	s.room = sync.NewCond(&s.roomMu)
	s.uncommitted = sync.NewCond(&s.mu)
	if agent {
		s.maxIn, s.next, s.maxPeer = MaxFromCaddy, 2, maxStreams
	} else {
		s.maxIn, s.next, s.maxPeer, s.budget = MaxFromAgent, 1, MaxAgentStreams, MaxHeld
	}
	return s
}

// Client starts Caddy's side of a session: it sends Hello, waits for the agent's and
// checks its version, then reads frames in the background. handler (nil: none) serves
// streams the agent opens. closer closes the transport; the caller bounds the handshake
// by closing it.
func Client(r io.Reader, w io.Writer, closer io.Closer, hello HelloMsg, handler func(*Stream)) (*Session, error) {
	s := newSession(false, r, w, closer, handler)
	if err := s.handshake(hello); err != nil {
		s.fail(err)
		return nil, err
	}
	go s.readLoop()
	return s, nil
}

// Serve runs the agent's side of a session until the transport ends: it waits for
// Caddy's Hello, answers with hello, and calls handler in a goroutine of its own for each
// stream Caddy opens. It returns nil when Caddy closes the channel.
func Serve(r io.Reader, w io.Writer, hello HelloMsg, handler func(*Stream)) error {
	// A session that fails closes its transport, so Caddy sees it end and starts
	// another agent instead of waiting on a session nobody serves.
	var c closeAll
	for _, x := range []any{w, r} {
		if x, ok := x.(io.Closer); ok {
			c = append(c, x)
		}
	}
	s := newSession(true, r, w, c, handler)
	if err := s.handshake(hello); err != nil {
		s.fail(err)
		return err
	}
	s.readLoop()
	if errors.Is(s.err, io.EOF) {
		return nil
	}
	return s.err
}

func (s *Session) handshake(hello HelloMsg) error {
	hello.Version = Version
	b, _ := json.Marshal(hello)
	if !s.agent {
		if err := s.write(Hello, 0, b); err != nil {
			return err
		}
	}
	var hdr [headerSize]byte
	f, err := readFrame(s.r, &hdr, maxHello, nil)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("the agent ended before its greeting: %w", io.ErrUnexpectedEOF)
		}
		return err
	}
	if f.typ != Hello || f.stream != 0 {
		return protoErr("first frame is type %d, not a greeting", f.typ)
	}
	var peer HelloMsg
	if err := json.Unmarshal(f.payload, &peer); err != nil {
		return protoErr("greeting: %v", err)
	}
	if peer.Version != Version {
		return fmt.Errorf("%w: the peer speaks version %d, this side %d", ErrVersion, peer.Version, Version)
	}
	peer.Build = clean(peer.Build, 100)
	s.peer = peer
	if s.agent {
		return s.write(Hello, 0, b)
	}
	return nil
}

// closeAll closes each of its closers.
type closeAll []io.Closer

func (c closeAll) Close() error {
	for _, x := range c {
		_ = x.Close()
	}
	return nil
}

// ErrVersion is the handshake's error when the two sides speak different versions.
var ErrVersion = errors.New("agent protocol version mismatch")

// Peer returns what the other side said in its greeting.
func (s *Session) Peer() HelloMsg { return s.peer }

// Done is closed when the session has ended.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err returns why the session ended, or nil while it runs.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close ends the session and every stream on it.
func (s *Session) Close() error {
	s.fail(ErrClosed)
	return nil
}

// Streams returns how many streams are open.
func (s *Session) Streams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.streams)
}

// Held returns what the session holds received and not read yet, as charged against
// MaxHeld: queued bytes and each queued piece's overhead.
func (s *Session) Held() int64 { return s.held.Load() }

// Open starts a stream with a request the peer's handler reads.
// On Caddy's side, a stream whose window the budget has no room for waits up to
// openWait for streams to end, then fails.
func (s *Session) Open(req []byte) (*Stream, error) {
	if err := s.reserveWindow(); err != nil {
		return nil, err
	}
	// Ids go out in order: the peer refuses a stream opened after a higher one.
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	if s.err != nil || len(s.streams) >= maxStreams {
		err := s.err
		if err == nil {
			err = fmt.Errorf("agent channel: %d streams open already; wait for some to end", maxStreams)
		}
		if s.budget > 0 {
			s.committed -= InitialWindow
			s.uncommitted.Broadcast()
		}
		s.mu.Unlock()
		return nil, err
	}
	st := s.newStream(s.next, nil)
	if s.budget > 0 {
		st.commit = InitialWindow // reserved above
	}
	s.next += 2
	s.streams[st.id] = st
	s.mu.Unlock()
	if err := s.writeLocked(Open, st.id, req); err != nil {
		return nil, err
	}
	return st, nil
}

func (s *Session) newStream(id uint32, req []byte) *Stream {
	st := &Stream{s: s, id: id, req: req, sendWin: InitialWindow, recvWin: InitialWindow, done: make(chan struct{})}
	st.cond = sync.NewCond(&st.mu)
	if s.agent {
		st.controls = make(chan Control, 16)
	}
	return st
}

// write sends one frame; a write that cannot finish within writeTimeout ends the session.
func (s *Session) write(typ byte, id uint32, payload ...[]byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.writeLocked(typ, id, payload...)
}

func (s *Session) writeLocked(typ byte, id uint32, payload ...[]byte) error {
	if err := s.Err(); err != nil {
		return err
	}
	s.wbuf = appendFrame(s.wbuf[:0], typ, id, payload...)
	return s.flushLocked()
}

// flushLocked writes wbuf out.
func (s *Session) flushLocked() error {
	if d, ok := s.w.(deadliner); ok && !s.agent {
		_ = d.SetWriteDeadline(time.Now().Add(writeTimeout))
	}
	if _, err := s.w.Write(s.wbuf); err != nil {
		err = fmt.Errorf("writing to the agent channel: %w", err)
		s.fail(err)
		return err
	}
	if cap(s.wbuf) > maxBatch+64<<10 {
		s.wbuf = nil
	}
	return nil
}

// raiseLimit is the quarters of MaxHeld the windows may add up to through raises
// (SetReceiveWindow): the rest stays free for new streams, a command's among them.
const raiseLimit = 3

// maxBatch is the most bytes of one stream sent in one write: several Data frames at
// once, so a bulk transfer pays one system call (on each side) per batch, not per frame.
const maxBatch = 256 << 10

// writeData sends p (at most maxBatch bytes) on channel ch as Data frames of at most
// MaxData bytes each, in one write.
func (s *Session) writeData(id uint32, ch byte, p []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.Err(); err != nil {
		return err
	}
	b := s.wbuf[:0]
	for len(p) > 0 {
		n := min(len(p), MaxData-1)
		b = appendFrame(b, Data, id, []byte{ch}, p[:n])
		p = p[n:]
	}
	s.wbuf = b
	return s.flushLocked()
}

// fail ends the session with err (the first error wins) and every stream with it.
func (s *Session) fail(err error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = err
	streams := s.streams
	s.streams = map[uint32]*Stream{}
	s.uncommitted.Broadcast()
	s.mu.Unlock()
	s.ended.Store(true)
	s.roomMu.Lock()
	s.room.Broadcast()
	s.roomMu.Unlock()
	if s.closer != nil {
		_ = s.closer.Close()
	}
	lost := fmt.Errorf("%w: %w", ErrLost, err)
	for _, st := range streams {
		st.end(false, 0, lost)
	}
	close(s.done)
}

func (s *Session) readLoop() {
	var hdr [headerSize]byte
	for {
		f, err := readFrame(s.r, &hdr, s.maxIn, &s.rbuf)
		if err == nil {
			if f.typ == Data || f.typ == EOF {
				s.waitRoom(int64(len(f.payload)) + chunkCost)
			}
			err = s.dispatch(f)
		}
		if err != nil {
			s.fail(err)
			return
		}
	}
}

func (s *Session) stream(id uint32) *Stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streams[id]
}

// peerParity reports whether id is one the peer may open.
func (s *Session) peerParity(id uint32) bool { return id != 0 && (id%2 == 1) == s.agent }

func (s *Session) dispatch(f frame) error {
	if f.typ == Hello {
		return protoErr("a second greeting")
	}
	if f.stream == 0 {
		switch f.typ {
		case Ping:
			return s.write(Pong, 0, f.payload)
		case Pong:
			return nil
		}
		return protoErr("frame type %d on stream 0", f.typ)
	}
	if f.typ == Open {
		return s.accept(f)
	}
	if (f.typ == Signal || f.typ == Resize) && !s.agent {
		return protoErr("frame type %d sent to Caddy", f.typ)
	}
	st := s.stream(f.stream)
	if st == nil {
		// A stream this side has closed or that has ended: what is still on its way is
		// dropped. A stream that never existed is the peer's error.
		s.mu.Lock()
		known := f.stream < s.next || (s.peerParity(f.stream) && f.stream <= s.lastPeer)
		s.mu.Unlock()
		if !known {
			return protoErr("frame type %d for stream %d, which was never opened", f.typ, f.stream)
		}
		return nil
	}
	return st.receive(f)
}

func (s *Session) accept(f frame) error {
	s.mu.Lock()
	if !s.peerParity(f.stream) || f.stream <= s.lastPeer {
		s.mu.Unlock()
		return protoErr("stream %d opened out of order", f.stream)
	}
	s.lastPeer = f.stream
	if s.handler == nil || s.peerOpen >= s.maxPeer || s.err != nil ||
		(s.budget > 0 && s.committed+InitialWindow > s.budget) {
		s.mu.Unlock()
		return s.write(Reset, f.stream, []byte("not accepted"))
	}
	// A copy: the payload is the read loop's buffer.
	st := s.newStream(f.stream, append([]byte(nil), f.payload...))
	s.commitLocked(st)
	st.peerOpened = true
	s.streams[st.id] = st
	s.peerOpen++
	s.mu.Unlock()
	go s.handler(st)
	return nil
}

// openWait bounds how long Open waits for room in the budget for a new stream's window.
var openWait = 10 * time.Second

// reserveWindow counts a new stream's window in committed once the budget has room for
// it, waiting up to openWait.
func (s *Session) reserveWindow() error {
	if s.budget == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var timer *time.Timer
	expired := false
	for s.committed+InitialWindow > s.budget && s.err == nil {
		if expired {
			return fmt.Errorf("agent channel: the open streams' windows have taken the session's whole budget of %d MiB for %v; wait for transfers to end, or close idle ones", s.budget>>20, openWait)
		}
		if timer == nil {
			timer = time.AfterFunc(openWait, func() {
				s.mu.Lock()
				expired = true
				s.uncommitted.Broadcast()
				s.mu.Unlock()
			})
			defer timer.Stop()
		}
		s.uncommitted.Wait()
	}
	if s.err != nil {
		return s.err
	}
	s.committed += InitialWindow
	return nil
}

// commitLocked counts a new stream's window in committed (under s.mu).
func (s *Session) commitLocked(st *Stream) {
	if s.budget > 0 {
		st.commit = InitialWindow
		s.committed += InitialWindow
	}
}

// uncommit takes a stream's window out of committed once nothing more can arrive on
// it and it holds nothing: it was closed, or it ended and was read to the end.
func (s *Session) uncommit(st *Stream) {
	if s.budget == 0 {
		return
	}
	s.mu.Lock()
	if st.commit > 0 {
		s.committed -= st.commit
		st.commit = 0
		s.uncommitted.Broadcast()
	}
	s.mu.Unlock()
}

// Committed returns what the windows of the session's live streams add up to, as
// granted within MaxHeld.
func (s *Session) Committed() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.committed
}

// forget removes an ended stream.
func (s *Session) forget(st *Stream) {
	s.mu.Lock()
	if s.streams[st.id] == st {
		delete(s.streams, st.id)
		if st.peerOpened {
			s.peerOpen--
		}
	}
	s.mu.Unlock()
}

// waitRoom returns once the session holds little enough to take cost more, or has
// ended: the read loop's backpressure. Windows are granted within the budget, so only a
// peer whose tiny frames cost more than their bytes gets here; it then waits on its own
// writes, and only this session's streams wait with it.
func (s *Session) waitRoom(cost int64) {
	if s.budget == 0 || s.held.Load()+cost <= s.budget {
		return
	}
	s.roomMu.Lock()
	s.waiting.Store(true)
	for s.held.Load()+cost > s.budget && !s.ended.Load() {
		s.room.Wait()
	}
	s.waiting.Store(false)
	s.roomMu.Unlock()
}

// tight reports whether the session holds more than half its budget: streams that
// still hold unread data then get no new credit, so pieces' overhead does not carry
// the session to its budget; a stream whose reader has caught up still gets its credit.
func (s *Session) tight() bool { return s.budget > 0 && s.held.Load() > s.budget/2 }

// release accounts for n bytes no longer held, waking the read loop and returning the
// credit held back while the session was tight.
func (s *Session) release(n int64) {
	if n == 0 || s.budget == 0 {
		return
	}
	left := s.held.Add(-n)
	if s.waiting.Load() {
		s.roomMu.Lock()
		s.room.Broadcast()
		s.roomMu.Unlock()
	}
	if left <= s.budget/2 && s.nstarve.Load() > 0 {
		s.feedStarved()
	}
}

// starve records a stream whose credit is held back; it is fed once the session is no
// longer tight (at once when it stopped being so meanwhile).
func (s *Session) starve(st *Stream) {
	s.roomMu.Lock()
	s.starved = append(s.starved, st)
	s.nstarve.Add(1)
	s.roomMu.Unlock()
	if !s.tight() {
		s.feedStarved()
	}
}

// feedStarved returns the credit held back from starved streams.
func (s *Session) feedStarved() {
	s.roomMu.Lock()
	list := s.starved
	s.starved = nil
	s.nstarve.Store(0)
	s.roomMu.Unlock()
	for _, st := range list {
		st.mu.Lock()
		credit := 0
		if !st.finished && !st.abandoned {
			credit, st.unacked = st.unacked, 0
		}
		st.starving = false
		st.mu.Unlock()
		if credit > 0 {
			_ = s.write(Window, st.id, binary.BigEndian.AppendUint32(nil, uint32(credit)))
		}
	}
}

// clean makes text from the peer printable and short.
func clean(b string, max int) string {
	if len(b) > max {
		b = b[:max]
	}
	b = strings.ToValidUTF8(b, "?")
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return '?'
		}
		return r
	}, b)
}

// Stream is one piece of work on a session: a command, later a file or a connection.
type Stream struct {
	s          *Session
	id         uint32
	req        []byte
	peerOpened bool

	mu       sync.Mutex
	cond     *sync.Cond
	q        []Chunk
	qBytes   int     // data bytes received and not read yet
	held     int64   // what q costs against the session's budget
	unacked  int     // data bytes read and not yet credited back
	starving bool    // its credit waits for the session to drain (Session.starve)
	peerEOF  [3]bool // channels the peer has ended
	commit   int64   // what the stream counts in the session's committed (under s.mu)
	sendWin  int
	recvWin  int // what the peer may have in flight: InitialWindow, or more when raised
	// Deadlines of ReadChunk and of Write's wait for credit; zero: none.
	rdeadline, wdeadline time.Time
	rtimer, wtimer       *time.Timer
	// abandoned: Caddy closed the stream; what still arrives is dropped, but the stream
	// stays known until the agent's Exit, so the program's end can still be awaited.
	abandoned bool
	sentEnd   bool  // this side sent Exit or Reset
	finished  bool  // Exit or Reset seen, or ended here
	exited    bool  // ended by Exit
	code      int32 // the Exit status
	err       error // why it ended otherwise
	done      chan struct{}
	controls  chan Control
}

// Session returns the session the stream belongs to.
func (st *Stream) Session() *Session { return st.s }

// ID returns the stream's id.
func (st *Stream) ID() uint32 { return st.id }

// Request returns the Open frame's payload of a stream the peer opened. The stream
// keeps it no longer: the first call takes it, later ones return nil.
func (st *Stream) Request() []byte {
	st.mu.Lock()
	defer st.mu.Unlock()
	req := st.req
	st.req = nil
	return req
}

// Controls delivers the signals and resizes Caddy sends (on the agent's side).
func (st *Stream) Controls() <-chan Control { return st.controls }

// Done is closed when the stream has ended.
func (st *Stream) Done() <-chan struct{} { return st.done }

func (st *Stream) receive(f frame) error {
	switch f.typ {
	case Data, EOF:
		ch := f.payload[0]
		if ch > Stderr {
			return protoErr("channel %d", ch)
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		if st.abandoned {
			return nil
		}
		if st.peerEOF[ch] {
			return protoErr("stream %d: frame after the end of channel %d", st.id, ch)
		}
		var cost int64
		if f.typ == EOF {
			st.peerEOF[ch] = true
			st.q = append(st.q, Chunk{Ch: ch, EOF: true})
			cost = chunkCost
		} else {
			p := f.payload[1:]
			n := len(p)
			if st.qBytes+st.unacked+n > st.recvWin {
				return protoErr("stream %d: %d bytes beyond its window", st.id, st.qBytes+st.unacked+n-st.recvWin)
			}
			st.qBytes += n
			// Copied out of the read loop's buffer: into the last piece of the same
			// channel when it is short or has room, else into a piece of its own.
			if k := len(st.q) - 1; k >= 0 && !st.q[k].EOF && st.q[k].Ch == ch &&
				(len(st.q[k].Data) < mergeBelow || len(st.q[k].Data)+n <= cap(st.q[k].Data)) {
				was := cap(st.q[k].Data)
				st.q[k].Data = append(st.q[k].Data, p...)
				cost = int64(cap(st.q[k].Data) - was)
			} else {
				data := append([]byte(nil), p...)
				st.q = append(st.q, Chunk{Ch: ch, Data: data})
				cost = int64(cap(data)) + chunkCost
			}
		}
		st.held += cost
		st.s.held.Add(cost)
		st.cond.Broadcast()
	case Window:
		inc := binary.BigEndian.Uint32(f.payload)
		st.mu.Lock()
		defer st.mu.Unlock()
		if inc == 0 || int64(st.sendWin)+int64(inc) > MaxWindow {
			return protoErr("stream %d: credit of %d beyond the window", st.id, inc)
		}
		st.sendWin += int(inc)
		st.cond.Broadcast()
	case Exit:
		st.end(true, int32(binary.BigEndian.Uint32(f.payload)), nil)
	case Reset:
		st.end(false, 0, fmt.Errorf("agent: %s", clean(string(f.payload), maxReason)))
	case Signal:
		select {
		case st.controls <- Control{Signal: int(f.payload[0])}:
		default:
		}
	case Resize:
		select {
		case st.controls <- Control{Rows: binary.BigEndian.Uint16(f.payload), Cols: binary.BigEndian.Uint16(f.payload[2:])}:
		default:
		}
	}
	return nil
}

// end marks the stream ended; what was received stays readable.
func (st *Stream) end(exited bool, code int32, err error) {
	st.mu.Lock()
	if st.finished {
		st.mu.Unlock()
		return
	}
	st.finished, st.exited, st.code, st.err = true, exited, code, err
	drained := len(st.q) == 0
	st.cond.Broadcast()
	st.mu.Unlock()
	if drained {
		st.s.uncommit(st)
	}
	st.s.forget(st) // before done, so whoever waits on Done sees the stream gone
	close(st.done)
}

// ReadChunk returns the next chunk the peer sent; io.EOF after the stream's Exit, or the
// reason it was reset.
func (st *Stream) ReadChunk() (Chunk, error) {
	st.mu.Lock()
	for len(st.q) == 0 && !st.finished && !st.abandoned {
		if !st.rdeadline.IsZero() && !time.Now().Before(st.rdeadline) {
			st.mu.Unlock()
			return Chunk{}, os.ErrDeadlineExceeded
		}
		st.cond.Wait()
	}
	if st.abandoned {
		st.mu.Unlock()
		return Chunk{}, ErrClosed
	}
	if len(st.q) == 0 {
		err := st.err
		if err == nil {
			err = io.EOF
		}
		st.mu.Unlock()
		return Chunk{}, err
	}
	c := st.q[0]
	st.q[0] = Chunk{}
	st.q = st.q[1:]
	if len(st.q) == 0 {
		st.q = nil
	}
	st.qBytes -= len(c.Data)
	cost := int64(cap(c.Data)) + chunkCost
	st.held -= cost
	st.unacked += len(c.Data)
	var credit int
	starve := false
	if st.unacked >= st.recvWin/4 && !st.finished {
		// Only a stream that still holds data waits for the session to drain: one
		// whose reader keeps up is never held back by the slow readers of others.
		if len(st.q) > 0 && st.s.tight() {
			if !st.starving {
				st.starving, starve = true, true
			}
		} else {
			credit, st.unacked = st.unacked, 0
		}
	}
	drained := st.finished && len(st.q) == 0
	st.mu.Unlock()
	if drained {
		st.s.uncommit(st)
	}
	st.s.release(cost)
	if starve {
		st.s.starve(st)
	}
	if credit > 0 {
		_ = st.s.write(Window, st.id, binary.BigEndian.AppendUint32(nil, uint32(credit)))
	}
	return c, nil
}

// Write sends p on channel ch, waiting for credit as the peer reads; past the write
// deadline (SetWriteDeadline) the wait ends with os.ErrDeadlineExceeded.
func (st *Stream) Write(ch byte, p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		st.mu.Lock()
		for st.sendWin == 0 && !st.finished && !st.abandoned {
			if !st.wdeadline.IsZero() && !time.Now().Before(st.wdeadline) {
				st.mu.Unlock()
				return written, os.ErrDeadlineExceeded
			}
			st.cond.Wait()
		}
		if st.abandoned {
			st.mu.Unlock()
			return written, ErrClosed
		}
		if st.finished {
			err := st.err
			if err == nil || st.exited {
				err = ErrClosed
			}
			st.mu.Unlock()
			return written, err
		}
		n := min(len(p), st.sendWin, maxBatch)
		st.sendWin -= n
		st.mu.Unlock()
		if err := st.s.writeData(st.id, ch, p[:n]); err != nil {
			return written, err
		}
		written += n
		p = p[n:]
	}
	return written, nil
}

// SetReceiveWindow raises to n (at most MaxWindow) how many bytes the peer may have in
// flight on the stream, for a bulk transfer whose round trips would otherwise bound
// its throughput; this side then holds up to that much of the stream. It never lowers
// the window. On Caddy's side the raise is granted only as far as the session's windows
// stay within raiseLimit of MaxHeld: past it the stream keeps a smaller window.
func (st *Stream) SetReceiveWindow(n int) error {
	n = min(n, MaxWindow)
	s := st.s
	st.mu.Lock()
	inc := n - st.recvWin
	if inc <= 0 || st.finished || st.abandoned {
		st.mu.Unlock()
		return nil
	}
	if s.budget > 0 {
		s.mu.Lock()
		if st.commit == 0 {
			inc = 0
		}
		inc = min(inc, int(s.budget*raiseLimit/4-s.committed))
		if inc > 0 {
			st.commit += int64(inc)
			s.committed += int64(inc)
		}
		s.mu.Unlock()
		if inc <= 0 {
			st.mu.Unlock()
			return nil
		}
	}
	st.recvWin += inc
	st.mu.Unlock()
	return st.s.write(Window, st.id, binary.BigEndian.AppendUint32(nil, uint32(inc)))
}

// CloseChannel tells the peer nothing more comes on ch (stdin's end, for a command).
func (st *Stream) CloseChannel(ch byte) error {
	if st.isFinished() {
		return nil
	}
	return st.s.write(EOF, st.id, []byte{ch})
}

// Signal asks the agent to send sig to the stream's process.
func (st *Stream) Signal(sig int) error {
	if sig < 1 || sig > 64 {
		return fmt.Errorf("signal %d out of range", sig)
	}
	return st.s.write(Signal, st.id, []byte{byte(sig)})
}

// Resize sets the size of the stream's terminal.
func (st *Stream) Resize(rows, cols uint16) error {
	var b [4]byte
	binary.BigEndian.PutUint16(b[:], rows)
	binary.BigEndian.PutUint16(b[2:], cols)
	return st.s.write(Resize, st.id, b[:])
}

// Exit ends the stream with a status (the agent's side, after the last data). It is
// sent even when Caddy has closed the stream: Caddy may wait for the program's end.
func (st *Stream) Exit(code int32) error {
	if !st.markSent() {
		return nil
	}
	err := st.s.write(Exit, st.id, binary.BigEndian.AppendUint32(nil, uint32(code)))
	st.end(true, code, nil)
	return err
}

// Reset aborts the stream, telling the peer why (the agent's side).
func (st *Stream) Reset(reason string) error {
	if !st.markSent() {
		return nil
	}
	err := st.s.write(Reset, st.id, []byte(clean(reason, maxReason)))
	st.end(false, 0, ErrClosed)
	// Nobody reads a stream this side refused: what came before the refusal goes.
	st.mu.Lock()
	held := st.held
	st.q, st.qBytes, st.held = nil, 0, 0
	st.mu.Unlock()
	st.s.release(held)
	return err
}

func (st *Stream) markSent() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.sentEnd {
		return false
	}
	st.sentEnd = true
	return true
}

// Close abandons the stream (Caddy's side): reads and writes end at once, what was
// received and not read is dropped, the agent is told to stop relaying, and Done still
// closes when the program ends.
func (st *Stream) Close() error {
	st.mu.Lock()
	if st.abandoned {
		st.mu.Unlock()
		return nil
	}
	held, finished := st.held, st.finished
	st.abandoned, st.q, st.qBytes, st.held = true, nil, 0, 0
	st.stopTimers()
	st.cond.Broadcast()
	st.mu.Unlock()
	st.s.uncommit(st) // what still arrives is dropped
	st.s.release(held)
	if finished {
		return nil
	}
	return st.s.write(Reset, st.id, []byte("closed"))
}

// SetReadDeadline makes ReadChunk fail with os.ErrDeadlineExceeded after t.
func (st *Stream) SetReadDeadline(t time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.rdeadline = t
	st.setTimer(&st.rtimer, t)
}

// SetWriteDeadline makes Write's wait for credit fail with os.ErrDeadlineExceeded
// after t, so a peer that never reads cannot hold a writer.
func (st *Stream) SetWriteDeadline(t time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.wdeadline = t
	st.setTimer(&st.wtimer, t)
}

// setTimer wakes the stream's waiters at t (none when t is zero), replacing *timer.
func (st *Stream) setTimer(timer **time.Timer, t time.Time) {
	if *timer != nil {
		(*timer).Stop()
		*timer = nil
	}
	if !t.IsZero() {
		*timer = time.AfterFunc(time.Until(t), func() {
			st.mu.Lock()
			st.cond.Broadcast()
			st.mu.Unlock()
		})
	}
	st.cond.Broadcast()
}

// stopTimers stops the deadlines' timers, which would keep the stream alive.
func (st *Stream) stopTimers() {
	for _, t := range []*time.Timer{st.rtimer, st.wtimer} {
		if t != nil {
			t.Stop()
		}
	}
	st.rtimer, st.wtimer = nil, nil
}

func (st *Stream) isFinished() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.finished
}

// Status returns the stream's Exit status once it has ended: ok is false while it runs
// and when it was reset or its session ended.
func (st *Stream) Status() (code int, ok bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return int(st.code), st.exited
}

// Err returns why the stream was reset, or nil.
func (st *Stream) Err() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.err
}
