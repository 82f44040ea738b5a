package mcphttp

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"go.uber.org/zap"
)

// Replies hands a client's reply to a request of this server (elicitation/create;
// sampling and roots alike) to the server that made the request, when Caddy instances
// share a storage behind a balancer that sent the reply to another one.
//
// Every request mcp-go writes to a client leaves with an id that names it
// ([Replies.Writer]): "srv-" inbox "-" number "-" time "-" MAC, where inbox is this
// server's, number is mcp-go's id of the request, time is when it was made, and the MAC
// binds them to the session and its person. A reply to it ([Replies.Route]) is
//   - for this server's inbox: given to mcp-go with mcp-go's id again, once;
//   - for another inbox: sealed (signed, with an expiry) and put in the store under
//     inbox-number, and answered 202. The server that made the request looks there
//     while the request waits, takes the entry, checks it, and replays the reply into
//     its own mcp-go, which delivers it to the request.
//
// A reply whose id another session or person was given, that was altered, or whose
// request is older than the TTL is refused; an entry is taken once, and one nobody
// takes is swept once expired.
type Replies struct {
	o     ReplyOptions
	inbox string // this server's: new with each Replies, so that a reload's numbers start afresh

	mu      sync.Mutex
	pending map[int64]waiting // mcp-go's ids of the requests written and not yet answered
	polling bool
	swept   time.Time
}

// ReplyOptions are what [NewReplies] takes.
type ReplyOptions struct {
	Key []byte // signs ids and entries; the same on every instance
	// Store is the storage every instance shares; nil: a reply to another instance's
	// request is refused.
	Store ReplyStore
	// MCP is this server's mcp-go handler, into which a reply handed over is replayed.
	MCP interface {
		Handle(w server.HTTPResponseWriter, r *server.HTTPRequest)
	}
	// WithPerson returns ctx as the site's requests of person carry it (the session ids
	// check it).
	WithPerson func(ctx context.Context, person string) context.Context
	Logger     *zap.Logger
	Poll       time.Duration // how often a waiting request's entry is looked for; default 100 ms
	TTL        time.Duration // how long a request may be answered; default 10 minutes
	Now        func() time.Time
}

// ReplyStore keeps sealed replies between instances.
type ReplyStore interface {
	Put(ctx context.Context, name string, entry []byte) error
	// Take returns the entry under name and removes it; nil when there is none.
	Take(ctx context.Context, name string) ([]byte, error)
	// Sweep removes the entries stored before t.
	Sweep(ctx context.Context, t time.Time) error
}

// waiting is a request of this server that waits for its reply.
type waiting struct{ session, person string }

// MaxReply bounds a reply handed to another instance; an answer to a question is far
// smaller.
const MaxReply = 64 << 10

// replyPrefix starts the ids this server gives its requests.
const replyPrefix = "srv-"

var replyIDForm = regexp.MustCompile(`^srv-([0-9a-f]{16})-([0-9]{1,18})-([0-9]{1,12})-([0-9a-f]{32})$`)

// NewReplies makes the replies of one mcp-go server.
func NewReplies(o ReplyOptions) *Replies {
	if o.Poll <= 0 {
		o.Poll = 100 * time.Millisecond
	}
	if o.TTL <= 0 {
		o.TTL = 10 * time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return &Replies{o: o, inbox: hex.EncodeToString(b), pending: map[int64]waiting{}}
}

// Writer wraps w, the response to a request of session (person's), so that the
// requests mcp-go writes on it carry ids that name this server. Call end once the
// response is done: its requests are no longer waited for then (mcp-go's wait ends
// with the request that made them). Without a session (protocol 2026-07-28, or
// initialize) w is returned as it is.
func (r *Replies) Writer(w server.HTTPResponseWriter, session, person string) (_ server.HTTPResponseWriter, end func()) {
	if session == "" {
		return w, func() {}
	}
	rw := &replyWriter{HTTPResponseWriter: w, r: r, session: session, person: person}
	return rw, rw.end
}

// replyWriter is a response on which mcp-go may write requests to the client.
type replyWriter struct {
	server.HTTPResponseWriter
	r               *Replies
	session, person string

	mu  sync.Mutex
	ids []int64
}

func (w *replyWriter) Write(p []byte) (int, error) {
	q, n, ok := w.r.rename(p, w.session, w.person)
	if !ok {
		return w.HTTPResponseWriter.Write(p)
	}
	w.mu.Lock()
	w.ids = append(w.ids, n)
	w.mu.Unlock()
	if _, err := w.HTTPResponseWriter.Write(q); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (w *replyWriter) end() {
	w.mu.Lock()
	ids := w.ids
	w.mu.Unlock()
	w.r.mu.Lock()
	for _, n := range ids {
		delete(w.r.pending, n)
	}
	w.r.mu.Unlock()
}

// sseMessage frames one message as mcp-go writes it to an event stream, in one write.
const sseMessage = "event: message\ndata: "

// rename gives p, when it is one SSE event carrying a request of mcp-go's, the id that
// names this server, and notes that the request waits. ok is false for anything else
// (notifications, responses), which goes out unchanged.
func (r *Replies) rename(p []byte, session, person string) (_ []byte, n int64, ok bool) {
	data, ok := bytes.CutPrefix(p, []byte(sseMessage))
	data, ok2 := bytes.CutSuffix(data, []byte("\n\n"))
	if !ok || !ok2 || bytes.IndexByte(data, '\n') >= 0 {
		return nil, 0, false
	}
	var head struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if json.Unmarshal(data, &head) != nil || head.Method == "" || json.Unmarshal(head.ID, &n) != nil {
		return nil, 0, false
	}
	out, err := withID(data, r.idFor(n, r.o.Now(), session, person))
	if err != nil {
		return nil, 0, false
	}
	r.expect(n, session, person)
	return append(append([]byte(sseMessage), out...), "\n\n"...), n, true
}

// idFor is the id request n of this server, made at made, has in session.
func (r *Replies) idFor(n int64, made time.Time, session, person string) string {
	ns, t := strconv.FormatInt(n, 10), strconv.FormatInt(made.Unix(), 10)
	return replyPrefix + r.inbox + "-" + ns + "-" + t + "-" + r.mac("id", r.inbox, ns, t, session, person)
}

// replyTarget is the request a reply's id names.
type replyTarget struct {
	inbox string
	n     int64
	made  time.Time
}

// Errors of a reply refused.
var (
	errReplyID      = errors.New("the reply's id names no request made in this session")
	errReplyExpired = errors.New("the request this reply answers has expired")
	errReplyDone    = errors.New("the request this reply answers was answered already or no longer waits")
)

// target checks id, a reply's, for session and person.
func (r *Replies) target(id, session, person string) (replyTarget, error) {
	m := replyIDForm.FindStringSubmatch(id)
	if m == nil || !hmac.Equal([]byte(m[4]), []byte(r.mac("id", m[1], m[2], m[3], session, person))) {
		return replyTarget{}, errReplyID
	}
	n, _ := strconv.ParseInt(m[2], 10, 64)
	t, _ := strconv.ParseInt(m[3], 10, 64)
	tg := replyTarget{inbox: m[1], n: n, made: time.Unix(t, 0)}
	if r.o.Now().Sub(tg.made) > r.o.TTL {
		return tg, errReplyExpired
	}
	return tg, nil
}

func (r *Replies) mac(parts ...string) string {
	m := hmac.New(sha256.New, r.o.Key)
	for _, p := range parts {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// expect notes that request n of session waits for its reply, and looks for replies
// handed over while any does.
func (r *Replies) expect(n int64, session, person string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending[n] = waiting{session, person}
	if !r.polling && r.o.Store != nil {
		r.polling = true
		go r.poll()
	}
}

// takeWaiting ends the wait of request n, if it waits in session for person's reply.
func (r *Replies) takeWaiting(n int64, session, person string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w, ok := r.pending[n]; !ok || w != (waiting{session, person}) {
		return false
	}
	delete(r.pending, n)
	return true
}

// Route looks at a message POSTed in session by person before mcp-go does. A reply to
// a request of this server goes on to mcp-go with mcp-go's id again (returned, goOn
// true); one to another instance's request is handed over and answered 202 here, and
// one refused is answered with the reason (goOn false for both). Anything else goes
// on unchanged.
func (r *Replies) Route(ctx context.Context, w http.ResponseWriter, body []byte, session, person string) (_ []byte, goOn bool) {
	if session == "" {
		return body, true
	}
	id, ok := replyID(body)
	if !ok {
		return body, true
	}
	if len(body) > MaxReply {
		WriteError(w, http.StatusRequestEntityTooLarge, mcp.INVALID_REQUEST,
			fmt.Sprintf("a reply of %d bytes is over the %d this server hands between instances", len(body), MaxReply))
		return nil, false
	}
	tg, err := r.target(id, session, person)
	switch {
	case err != nil:
	case tg.inbox == r.inbox && !r.takeWaiting(tg.n, session, person):
		err = errReplyDone
	case tg.inbox == r.inbox:
		out, werr := withID(body, tg.n)
		if werr == nil {
			return out, true
		}
		err = werr
	default:
		err = r.handOver(ctx, tg, body, session, person)
		if err == nil {
			w.WriteHeader(http.StatusAccepted)
			return nil, false
		}
		WriteError(w, http.StatusServiceUnavailable, mcp.INTERNAL_ERROR, err.Error()+"; send the reply again")
		return nil, false
	}
	WriteError(w, http.StatusBadRequest, mcp.INVALID_REQUEST, err.Error())
	return nil, false
}

// replyID is the id of body when body is a JSON-RPC response (no method) whose id is a
// string this server gives its requests.
func replyID(body []byte) (string, bool) {
	// Most messages are calls, some large (write_file): look for the id's prefix first.
	if len(body) == 0 || body[0] != '{' || !bytes.Contains(body, []byte(`"`+replyPrefix)) {
		return "", false
	}
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method json.RawMessage `json:"method"`
	}
	var id string
	if json.Unmarshal(body, &msg) != nil || msg.Method != nil || json.Unmarshal(msg.ID, &id) != nil {
		return "", false
	}
	return id, len(id) > len(replyPrefix) && id[:len(replyPrefix)] == replyPrefix
}

// withID is the JSON object msg with its id replaced by id.
func withID(msg []byte, id any) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(msg, &m); err != nil {
		return nil, err
	}
	b, err := json.Marshal(id)
	if err != nil {
		return nil, err
	}
	m["id"] = b
	return json.Marshal(m)
}

// replyEntry is a reply handed over in the store.
type replyEntry struct {
	Inbox   string          `json:"i"`
	N       int64           `json:"n"`
	Session string          `json:"s"`
	Person  string          `json:"p"`
	Body    json.RawMessage `json:"b"` // as the client sent it
	Stored  int64           `json:"t"` // Unix milliseconds
	Expires int64           `json:"e"` // Unix seconds
}

// entryName is the store's name of request n of inbox's entry.
func entryName(inbox string, n int64) string { return inbox + "-" + strconv.FormatInt(n, 10) }

// handOver puts the reply to request tg in the store, for the instance that made it.
func (r *Replies) handOver(ctx context.Context, tg replyTarget, body []byte, session, person string) error {
	if r.o.Store == nil {
		return errors.New("the request this reply answers was made by another instance, and there is no shared storage to hand it over")
	}
	now := r.o.Now()
	e := replyEntry{Inbox: tg.inbox, N: tg.n, Session: session, Person: person, Body: body,
		Stored: now.UnixMilli(), Expires: tg.made.Add(r.o.TTL).Unix()}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := r.o.Store.Put(ctx, entryName(tg.inbox, tg.n), r.seal(e)); err != nil {
		return fmt.Errorf("handing the reply to the instance that asked: %w", err)
	}
	r.o.Logger.Info("handed a client's reply to the instance that asked", zap.String("to", tg.inbox), zap.Int64("request", tg.n))
	r.sweepNow()
	return nil
}

// sweepNow removes expired entries, at most once per TTL: whoever hands replies over
// also removes those nobody took (their request ended first, or a client sent one
// twice).
func (r *Replies) sweepNow() {
	now := r.o.Now()
	r.mu.Lock()
	due := now.Sub(r.swept) > r.o.TTL
	if due {
		r.swept = now
	}
	r.mu.Unlock()
	if !due {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := r.o.Store.Sweep(ctx, now.Add(-r.o.TTL)); err != nil {
			r.o.Logger.Warn("removing expired client replies from the storage", zap.Error(err))
		}
	}()
}

// seal is e signed: its JSON, a newline, and the MAC of the JSON.
func (r *Replies) seal(e replyEntry) []byte {
	b, _ := json.Marshal(e)
	return append(append(b, '\n'), r.mac("entry", string(b))...)
}

// Errors of an entry dropped.
var (
	errEntryTampered = errors.New("its signature does not match")
	errEntryExpired  = errors.New("it has expired")
	errEntryOther    = errors.New("it is not the entry of the request that waits")
)

// open checks a sealed entry found under the name of request n of this server.
func (r *Replies) open(b []byte, n int64) (replyEntry, error) {
	var e replyEntry
	i := bytes.LastIndexByte(b, '\n')
	if i < 0 || !hmac.Equal(b[i+1:], []byte(r.mac("entry", string(b[:i])))) {
		return e, errEntryTampered
	}
	if err := json.Unmarshal(b[:i], &e); err != nil {
		return e, errEntryTampered
	}
	switch {
	case e.Inbox != r.inbox || e.N != n:
		return e, errEntryOther
	case r.o.Now().Unix() >= e.Expires:
		return e, errEntryExpired
	}
	return e, nil
}

// poll takes, every Poll while requests of this server wait, the replies other
// instances handed over for them.
func (r *Replies) poll() {
	t := time.NewTicker(r.o.Poll)
	defer t.Stop()
	for range t.C {
		r.mu.Lock()
		ns := make([]int64, 0, len(r.pending))
		for n := range r.pending {
			ns = append(ns, n)
		}
		if len(ns) == 0 {
			r.polling = false
		}
		r.mu.Unlock()
		if len(ns) == 0 {
			return
		}
		for _, n := range ns {
			r.takeHandedOver(n)
		}
	}
}

// takeHandedOver delivers the reply to request n another instance handed over, if any.
func (r *Replies) takeHandedOver(n int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := r.o.Store.Take(ctx, entryName(r.inbox, n))
	if err != nil {
		r.o.Logger.Warn("reading a client's reply handed over by another instance", zap.Error(err))
		return
	}
	if b == nil {
		return
	}
	e, err := r.open(b, n)
	if err == nil && !r.takeWaiting(n, e.Session, e.Person) {
		err = errEntryOther
	}
	if err != nil {
		r.o.Logger.Warn("dropped a client's reply handed over by another instance", zap.Int64("request", n), zap.Error(err))
		return
	}
	body, err := withID(e.Body, n)
	delivered := err == nil && r.deliver(ctx, e.Person, e.Session, body)
	r.o.Logger.Info("delivered a client's reply handed over by another instance",
		zap.String("inbox", r.inbox), zap.Int64("request", n), zap.Bool("delivered", delivered),
		zap.Duration("handed_over_in", r.o.Now().Sub(time.UnixMilli(e.Stored))))
}

// deliver replays body, a reply in session, into this server's mcp-go, which hands it
// to the request that waits; it reports whether mcp-go took it.
func (r *Replies) deliver(ctx context.Context, person, session string, body []byte) bool {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set(server.HeaderKeySessionID, session)
	w := &statusWriter{header: http.Header{}}
	r.o.MCP.Handle(w, &server.HTTPRequest{Method: http.MethodPost, Header: h, Body: body, Context: r.o.WithPerson(ctx, person)})
	return w.code == http.StatusAccepted
}

// statusWriter keeps the status of a replayed reply and drops its body.
type statusWriter struct {
	header http.Header
	code   int
}

func (w *statusWriter) Header() http.Header { return w.header }
func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}
func (w *statusWriter) Write(p []byte) (int, error) { w.WriteHeader(http.StatusOK); return len(p), nil }
func (w *statusWriter) Flush()                      {}
func (w *statusWriter) CanStream() bool             { return false }
