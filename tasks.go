package mcpsandbox

import (
	"context"
	"sync"

	"github.com/mark3labs/mcp-go/server"
)

// MCP tasks: a task-augmented tools/call of execute runs the same job as a plain call;
// the client follows it with tasks/get and tasks/result and may stop it with
// tasks/cancel. mcp-go runs the tool on the context of the request that created the
// task, which ends as soon as the task is created, so execute detaches from it and
// listens for tasks/cancel instead, through a slot the request carries.

type taskSlotKey struct{}

// taskSlot links one task-creating request to its task's cancellation.
type taskSlot struct {
	once      sync.Once
	cancelled chan struct{}
}

func (s *taskSlot) cancel() { s.once.Do(func() { close(s.cancelled) }) }

// withTaskSlot gives a request that creates a task a slot for its cancellation.
func withTaskSlot(ctx context.Context) context.Context {
	return context.WithValue(ctx, taskSlotKey{}, &taskSlot{cancelled: make(chan struct{})})
}

// taskContext returns, for a tool running as a task, a context that outlives the
// request that created it and ends on tasks/cancel; for other calls, ctx itself.
func taskContext(ctx context.Context) (context.Context, context.CancelFunc) {
	slot, ok := ctx.Value(taskSlotKey{}).(*taskSlot)
	if !ok {
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

// taskRegistry maps task ids to their slots, from creation to the end of the task.
type taskRegistry struct {
	mu    sync.Mutex
	slots map[string]*taskSlot
}

func (r *taskRegistry) hooks() *server.TaskHooks {
	h := &server.TaskHooks{}
	h.AddOnTaskCreated(func(ctx context.Context, m server.TaskMetrics) {
		if slot, ok := ctx.Value(taskSlotKey{}).(*taskSlot); ok {
			r.mu.Lock()
			r.slots[m.TaskID] = slot
			r.mu.Unlock()
		}
	})
	end := func(cancel bool) func(context.Context, server.TaskMetrics) {
		return func(_ context.Context, m server.TaskMetrics) {
			r.mu.Lock()
			slot := r.slots[m.TaskID]
			delete(r.slots, m.TaskID)
			r.mu.Unlock()
			if slot != nil && cancel {
				slot.cancel()
			}
		}
	}
	h.AddOnTaskCancelled(end(true))
	h.AddOnTaskCompleted(end(false))
	h.AddOnTaskFailed(end(false))
	return h
}
