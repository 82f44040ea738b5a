package mcptools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
)

// MCP tasks: a task-augmented tools/call of execute runs the same job as a plain call;
// the client follows it with tasks/get and tasks/result and may stop it with
// tasks/cancel. mcp-go runs the tool on the context of the request that created the
// task, which ends as soon as the task is created, so execute detaches from it and
// listens for tasks/cancel instead, through a slot the request carries.
//
// What tasks keep, and for how long. mcp-go (v1.2.1) keeps every task, its result
// included, in a map of its own: it takes the ttl the client asks for as sent, keeps a
// task without one forever, and removes an entry only when its ttl passes. It has no task
// store to plug in, and no call or hook that deletes a task, so a client could pin any
// amount of Caddy's memory for as long as it likes. taskStore bounds that from outside,
// with mcp-go's public hooks and tool middleware (a fork of mcp-go with a task store
// would do it with less code here, but would tie the project to the fork):
//
//   - a ttl beyond max_task_ttl, or none, is cut to max_task_ttl before mcp-go reads
//     it, so mcp-go itself forgets every task by then, and the client is told the ttl
//     that holds;
//   - a task-augmented call is refused, before mcp-go creates anything, when its session
//     already holds max_tasks tasks (requests without a session, as in protocol
//     2026-07-28, share one allowance), or the server max_tasks_total: the total
//     counts every record mcp-go keeps, until its ttl;
//   - what mcp-go stores as a task's result is a handle to the result held here, which
//     is dropped when the ttl passes or the session ends (DELETE /mcp, seen by
//     serveMCP): until its ttl, mcp-go keeps a record of a few hundred bytes, never the
//     output.
//
// Sessions do not expire on their own here (no idle timeout is set, and mcp-go's
// default session ids are not tracked), so a client that never ends its session has its
// results dropped by the ttl. mcp-go's session hooks are no substitute for DELETE: they
// fire when a GET stream ends, which a session outlives.

type taskSlotKey struct{}

// taskSlot is what one MCP request carries for the task it may create: the task's
// cancellation, and taskStore's accounting (guarded by taskStore.mu).
type taskSlot struct {
	once      sync.Once
	cancelled chan struct{}

	reserved bool          // admitted and counted, the task not created yet
	session  string        // the session it is counted against
	ttl      time.Duration // the ttl mcp-go was given
	taskID   string        // set once the task exists
}

func (s *taskSlot) cancel() { s.once.Do(func() { close(s.cancelled) }) }

func slotFrom(ctx context.Context) *taskSlot {
	slot, _ := ctx.Value(taskSlotKey{}).(*taskSlot)
	return slot
}

// taskContext returns, for a tool running as a task, a context that outlives the
// request that created it and ends on tasks/cancel; for other calls, ctx itself.
func taskContext(ctx context.Context) (context.Context, context.CancelFunc) {
	slot := slotFrom(ctx)
	if slot == nil {
		return ctx, func() {}
	}
	tctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		select {
		case <-slot.cancelled:
			cancel()
		case <-tctx.Done():
		}
	}()
	return tctx, cancel
}

// taskStore holds the results of MCP tasks and enforces max_task_ttl and max_tasks.
type taskStore struct {
	maxTTL     time.Duration
	perSession int // tasks one session may hold
	total      int // tasks mcp-go may keep in all

	mu       sync.Mutex
	tasks    map[string]*heldTask // every task mcp-go keeps, until its ttl passes
	sessions map[string]int       // per session: tasks admitted or holding a result
	reserved int                  // tasks admitted and not created yet
	closed   bool
}

// heldTask is taskStore's record of one task.
type heldTask struct {
	slot    *taskSlot
	session string
	owner   string      // the person whose call made it ("" for the operator)
	live    bool        // counts against its session: neither cancelled nor dropped
	dropped string      // why its result was dropped; "" while it is kept
	result  *taskResult // set when the tool returns
	timer   *time.Timer
}

func newTaskStore(maxTTL time.Duration, perSession, total int) *taskStore {
	return &taskStore{
		maxTTL: maxTTL, perSession: perSession, total: total,
		tasks: map[string]*heldTask{}, sessions: map[string]int{},
	}
}

// serverOptions wires the store into an MCP server whose hooks are hooks. They must
// come before other tool middleware, so that the others see the tool's own result.
func (s *taskStore) serverOptions(hooks *server.Hooks) []server.ServerOption {
	hooks.AddOnRequestInitialization(s.admit)
	hooks.AddBeforeCallTool(s.capTTL)
	hooks.AddAfterListTasks(s.listOwn)
	th := &server.TaskHooks{}
	th.AddOnTaskCreated(s.created)
	th.AddOnTaskCancelled(s.cancelled)
	return []server.ServerOption{
		// execute may run as an MCP task (tasks/get, tasks/result, tasks/cancel,
		// tasks/list), backed by the same jobs as its plain calls.
		server.WithTaskCapabilities(true, true, true),
		server.WithTaskHooks(th),
		server.WithToolHandlerMiddleware(s.keep),
	}
}

// request gives an MCP request a slot for the task it may create. done must be called
// once mcp-go has answered: it gives back an admission no task came of.
func (s *taskStore) request(ctx context.Context) (context.Context, func()) {
	slot := &taskSlot{cancelled: make(chan struct{})}
	return context.WithValue(ctx, taskSlotKey{}, slot), func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.unreserve(slot)
	}
}

func sessionOf(ctx context.Context) string {
	if cs := server.ClientSessionFromContext(ctx); cs != nil {
		return cs.SessionID()
	}
	return ""
}

// admit runs before mcp-go handles a message. It refuses a task-augmented tools/call
// beyond max_tasks, and tasks/result for a result dropped with its session. The message
// is decoded as mcp-go decodes it (encoding/json, the same fields), so both agree on
// what is a task.
func (s *taskStore) admit(ctx context.Context, _ any, message any) error {
	raw, ok := message.(json.RawMessage)
	if !ok {
		return nil
	}
	var head struct {
		Method string `json:"method"`
	}
	if json.Unmarshal(raw, &head) != nil {
		return nil // mcp-go answers that
	}
	switch head.Method {
	case string(mcp.MethodToolsCall):
		if asksForTask(raw) {
			return s.reserve(slotFrom(ctx), sessionOf(ctx))
		}
	case string(mcp.MethodTasksResult), string(mcp.MethodTasksGet), string(mcp.MethodTasksCancel):
		var msg struct {
			Params struct {
				TaskID string `json:"taskId"`
			} `json:"params"`
		}
		if json.Unmarshal(raw, &msg) != nil {
			return nil // mcp-go answers that
		}
		if err := s.checkOwner(msg.Params.TaskID, CallerFrom(ctx).Person); err != nil {
			return err
		}
		if head.Method == string(mcp.MethodTasksResult) {
			return s.checkKept(msg.Params.TaskID, sessionOf(ctx))
		}
	}
	return nil
}

// errTaskNotFound is what a person asking for a task of another person's is told: the
// same as for a task that does not exist.
var errTaskNotFound = errors.New("task not found")

// checkOwner refuses a task to anyone but the person whose call made it. mcp-go keeps
// tasks apart by session only when a request has a session id (protocol 2026-07-28
// has none), and a session id is no proof of who calls.
func (s *taskStore) checkOwner(taskID, person string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.tasks[taskID]; t != nil && t.owner != person {
		return errTaskNotFound
	}
	return nil
}

// listOwn removes from a tasks/list answer every task not made by the caller's person
// (and any this store does not know, which mcp-go is about to forget).
func (s *taskStore) listOwn(ctx context.Context, _ any, _ *mcp.ListTasksRequest, res *mcp.ListTasksResult) {
	if res == nil {
		return
	}
	person := CallerFrom(ctx).Person
	s.mu.Lock()
	defer s.mu.Unlock()
	own := res.Tasks[:0]
	for _, task := range res.Tasks {
		if t := s.tasks[task.TaskId]; t != nil && t.owner == person {
			own = append(own, task)
		}
	}
	res.Tasks = own
}

// asksForTask reports whether a tools/call message asks for a task: whenever mcp-go
// decodes it with a task (FuzzAsksForTask checks that), and also when mcp-go then fails
// to decode the task, which makes no task and gives the admission back.
func asksForTask(raw json.RawMessage) bool {
	var msg struct {
		Params struct {
			Task json.RawMessage `json:"task"`
		} `json:"params"`
	}
	return json.Unmarshal(raw, &msg) == nil && len(msg.Params.Task) > 0 && string(msg.Params.Task) != "null"
}

// reserve counts a task about to be created, or says why it may not be.
func (s *taskStore) reserve(slot *taskSlot, session string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.sessions[session]; n >= s.perSession {
		return fmt.Errorf("task not created: this session already holds %d tasks, the most one session may (max_tasks). "+
			"A task keeps its result until its ttl passes (at most %s after it was created) or its session ends. "+
			"Fetch the results you need with tasks/result and end the session (HTTP DELETE /mcp) to drop them, "+
			"cancel running tasks you no longer need with tasks/cancel, or wait for older tasks to expire; "+
			"execute also works without a task", n, human.Duration(s.maxTTL))
	}
	if n := len(s.tasks) + s.reserved; n >= s.total {
		return fmt.Errorf("task not created: the server already keeps %d tasks, the most it keeps across sessions (max_tasks). "+
			"Each is forgotten when its ttl passes (at most %s after it was created): wait for older tasks to expire, "+
			"or call execute without a task", n, human.Duration(s.maxTTL))
	}
	if slot == nil || slot.reserved {
		return nil // created counts it
	}
	slot.reserved, slot.session = true, session
	s.sessions[session]++
	s.reserved++
	return nil
}

// checkKept refuses tasks/result for a task whose result was dropped with its session,
// while mcp-go still has its record. A task of another session is left to mcp-go, which
// answers that it is not found.
func (s *taskStore) checkKept(taskID, session string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tasks[taskID]
	if t == nil || t.dropped == "" || (t.session != "" && session != "" && t.session != session) {
		return nil
	}
	return fmt.Errorf("the result of task %s is no longer kept: %s. Run the command again, or look for its job with job_list", taskID, t.dropped)
}

// capTTL cuts the ttl of a task-augmented call to max_task_ttl, or sets it when absent
// or not positive, before mcp-go reads it.
func (s *taskStore) capTTL(ctx context.Context, _ any, req *mcp.CallToolRequest) {
	if req.Params.Task == nil {
		return
	}
	ms := s.maxTTL.Milliseconds()
	if t := req.Params.Task.TTL; t != nil && *t > 0 && *t < ms {
		ms = *t
	}
	tp := *req.Params.Task
	tp.TTL = &ms
	req.Params.Task = &tp
	if slot := slotFrom(ctx); slot != nil {
		s.mu.Lock()
		slot.ttl = time.Duration(ms) * time.Millisecond
		s.mu.Unlock()
	}
}

// created records a task mcp-go has just created (it runs under mcp-go's task lock), and
// forgets it when its ttl passes, as mcp-go then does.
func (s *taskStore) created(ctx context.Context, m server.TaskMetrics) {
	slot := slotFrom(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	ttl := s.maxTTL
	if slot != nil {
		if slot.ttl > 0 {
			ttl = slot.ttl
		}
		s.unreserve(slot)
		slot.taskID = m.TaskID
	}
	t := &heldTask{slot: slot, session: m.SessionID, owner: CallerFrom(ctx).Person, live: true}
	s.sessions[m.SessionID]++
	s.tasks[m.TaskID] = t
	t.timer = time.AfterFunc(ttl, func() { s.expire(m.TaskID, t) })
}

// cancelled stops the command of a task cancelled with tasks/cancel; the task holds no
// result from then on, so it no longer counts against its session.
func (s *taskStore) cancelled(_ context.Context, m server.TaskMetrics) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tasks[m.TaskID]
	if t == nil {
		return
	}
	if t.slot != nil {
		t.slot.cancel()
	}
	if t.live {
		t.live = false
		s.uncount(t.session)
	}
}

// keep is the tool middleware that holds a task's result here and gives mcp-go a handle
// to it. Calls that are not tasks pass through.
func (s *taskStore) keep(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := next(ctx, req)
		slot := slotFrom(ctx)
		if req.Params.Task == nil || slot == nil || res == nil || err != nil {
			return res, err
		}
		return s.hold(slot, res), nil
	}
}

// hold keeps the result of the task slot's request made, and returns its handle. A
// call that made no task (its tool has no task support) keeps its result as is.
func (s *taskStore) hold(slot *taskSlot, res *mcp.CallToolResult) *mcp.CallToolResult {
	r := &taskResult{content: res.Content, structured: res.StructuredContent}
	why := ""
	s.mu.Lock()
	if slot.taskID == "" {
		s.mu.Unlock()
		return res
	}
	t := s.tasks[slot.taskID]
	switch {
	case s.closed:
		why = "the server's configuration was reloaded"
	case t == nil:
		why = "its ttl passed"
	case t.dropped != "":
		why = t.dropped
	case !t.live:
		why = "it was cancelled"
	default:
		t.result = r
	}
	s.mu.Unlock()
	if why != "" {
		return mcp.NewToolResultError("The result of this task was not kept: " + why + ". Run the command again, or look for its job with job_list.")
	}
	return r.handle(res)
}

// expire forgets a task whose ttl has passed, and its result.
func (s *taskStore) expire(id string, t *heldTask) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tasks[id] != t {
		return
	}
	delete(s.tasks, id)
	s.drop(t, "its ttl passed")
}

// endSession drops the results of a session's tasks. mcp-go keeps their records until
// their ttl, so they still count against max_tasks_total until then.
func (s *taskStore) endSession(session string) {
	if session == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.tasks {
		if t.session == session {
			s.drop(t, "its session ended")
		}
	}
}

// close drops every result when the configuration that owns the store is unloaded.
func (s *taskStore) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for id, t := range s.tasks {
		t.timer.Stop()
		s.drop(t, "the server's configuration was reloaded")
		delete(s.tasks, id)
	}
}

// drop lets go of a task's result. s.mu is held.
func (s *taskStore) drop(t *heldTask, why string) {
	if t.live {
		t.live = false
		s.uncount(t.session)
	}
	if t.dropped == "" {
		t.dropped = why
	}
	if t.result != nil {
		t.result.drop(why)
		t.result = nil
	}
}

// unreserve gives back the admission reserve counted for slot, if it still holds one:
// the task now exists (created counts it), or none came of the request. s.mu is held.
func (s *taskStore) unreserve(slot *taskSlot) {
	if slot.reserved {
		slot.reserved = false
		s.reserved--
		s.uncount(slot.session)
	}
}

// uncount takes one task off a session's count. s.mu is held.
func (s *taskStore) uncount(session string) {
	if s.sessions[session]--; s.sessions[session] <= 0 {
		delete(s.sessions, session)
	}
}

// taskResult is a task's result as held by taskStore; mcp-go holds only a handle to it
// (see handle), so dropping it here frees the output.
type taskResult struct {
	mu         sync.Mutex
	content    []mcp.Content
	structured any
	dropped    string
}

func (r *taskResult) drop(why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.content, r.structured, r.dropped = nil, nil, why
}

// handle returns res with its content and structured content replaced by handles that
// encode as them while the result is kept. mcp-go only encodes a stored result (its
// tasks/result copies the fields and marshals them), so reading the result under r.mu
// at that moment is enough for a drop to be safe at any time.
func (r *taskResult) handle(res *mcp.CallToolResult) *mcp.CallToolResult {
	h := *res
	h.Content = make([]mcp.Content, len(res.Content))
	for i := range h.Content {
		h.Content[i] = heldContent{r: r, i: i}
	}
	if res.StructuredContent != nil {
		h.StructuredContent = heldStructured{r}
	}
	return &h
}

// heldContent stands for content item i of a held result.
type heldContent struct {
	mcp.TextContent // for mcp.Content's unexported method; never encoded
	r               *taskResult
	i               int
}

// MarshalJSON encodes the item, or, once the result is dropped, a note saying so.
func (c heldContent) MarshalJSON() ([]byte, error) {
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	if c.r.dropped == "" {
		return json.Marshal(c.r.content[c.i])
	}
	text := ""
	if c.i == 0 {
		text = "The result of this task is no longer kept: " + c.r.dropped + ". Run the command again, or look for its job with job_list."
	}
	return json.Marshal(mcp.NewTextContent(text))
}

// heldStructured stands for the structured content of a held result.
type heldStructured struct{ r *taskResult }

// MarshalJSON encodes the structured content, or an empty object once it is dropped.
func (s heldStructured) MarshalJSON() ([]byte, error) {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	if s.r.dropped != "" {
		return []byte("{}"), nil
	}
	return json.Marshal(s.r.structured)
}
