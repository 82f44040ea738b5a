package mcptools

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
)

// The choices of the one field of a question about a host.
const (
	ChoiceOnce   = "allow_once"
	ChoiceAlways = "allow_always"
	ChoiceDeny   = "deny"
)

// ErrCannotAsk is returned by [Tools.AskHost] when nobody can be asked: no call that
// waits for that job is under way, or its client does not answer questions.
var ErrCannotAsk = errors.New("nobody can be asked")

// ErrBadAnswer is returned by [Tools.AskHost] for an answer outside the choices.
var ErrBadAnswer = errors.New("the answer is none of the choices")

// calls are the calls under way that wait for a job (execute, job_output,
// job_input), by job id: what a question about a host the job's command asks for is
// put to, the latest call first.
type calls struct {
	mu       sync.Mutex
	m        map[string][]*runningCall
	commands map[string]string // each job's command, for the question
	order    []string          // ids in commands, oldest first
	// onTrack, when set, runs as each call is tracked, before the call's command starts;
	// what it starts may go on beside the call until its ctx ends.
	onTrack func(rc *runningCall, job string)
}

// maxCommands bounds the commands remembered for questions.
const maxCommands = 1000

type runningCall struct {
	ctx     context.Context // the call's, cancelled when it returns
	person  string
	command string
	yield   *yielder // a 2026-07-28 call's: a question ends it; nil for others
}

// track ties job to the call of ctx until the returned func is called (when the call
// returns); questions open then end.
// command "" is the one tracked before under job, if remembered.
// y, when set, is how a question ends a 2026-07-28 call.
func (c *calls) track(ctx context.Context, job, command string, y *yielder) (untrack func()) {
	ctx, cancel := context.WithCancel(ctx)
	c.mu.Lock()
	if c.m == nil {
		c.m, c.commands = map[string][]*runningCall{}, map[string]string{}
	}
	if command == "" {
		command = c.commands[job]
	} else if _, ok := c.commands[job]; !ok {
		if len(c.order) >= maxCommands {
			delete(c.commands, c.order[0])
			c.order = c.order[1:]
		}
		c.order = append(c.order, job)
		c.commands[job] = command
	}
	rc := &runningCall{ctx: ctx, person: CallerFrom(ctx).Person, command: command, yield: y}
	c.m[job] = append(c.m[job], rc)
	onTrack := c.onTrack
	c.mu.Unlock()
	if onTrack != nil {
		onTrack(rc, job)
	}
	return func() {
		c.mu.Lock()
		list := slices.DeleteFunc(c.m[job], func(x *runningCall) bool { return x == rc })
		if len(list) == 0 {
			delete(c.m, job)
		} else {
			c.m[job] = list
		}
		c.mu.Unlock()
		cancel()
	}
}

// get is the latest call under way that waits for job.
func (c *calls) get(job string) *runningCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	list := c.m[job]
	if len(list) == 0 {
		return nil
	}
	return list[len(list)-1]
}

// AskHost asks the person, on the session of the latest call under way that waits for
// job in person's sandbox (execute, job_output or job_input), whether its command may reach host:port: form-mode elicitation with one
// field whose choices are ChoiceOnce, ChoiceAlways and ChoiceDeny. Decline and cancel
// are ChoiceDeny. It returns when answered, when ctx ends, or when the call returns.
// When no call of this instance waits for job, the question goes to another instance
// whose call does (Options.Relay), if any.
func (s *Tools) AskHost(ctx context.Context, person, job, host string, port int) (string, error) {
	rc := s.calls.get(job)
	if rc == nil || rc.person != person {
		return s.askElsewhere(ctx, person, job, host, port)
	}
	return s.askCall(ctx, rc, person, job, host, port)
}

// askCall asks on the call rc that waits for job.
func (s *Tools) askCall(ctx context.Context, rc *runningCall, person, job, host string, port int) (string, error) {
	if rc.yield != nil {
		return s.askByMRTR(ctx, rc, person, job, host, port)
	}
	session := server.ClientSessionFromContext(rc.ctx)
	withInfo, ok := session.(server.SessionWithClientInfo)
	if !ok || withInfo.GetClientCapabilities().Elicitation == nil {
		return "", fmt.Errorf("the client did not declare elicitation: %w", ErrCannotAsk)
	}
	// The question goes on the call's own stream; it ends with the call or the
	// connection that waits for it.
	actx, cancel := context.WithCancel(rc.ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	hostport := host + ":" + strconv.Itoa(port)
	res, err := s.server.RequestElicitation(actx, mcp.ElicitationRequest{Params: questionParams(rc.command, host, port)})
	switch {
	case err != nil && ctx.Err() != nil:
		return "", ctx.Err()
	case err != nil && rc.ctx.Err() != nil:
		return "", fmt.Errorf("the call returned: %w", ErrCannotAsk)
	case errors.Is(err, server.ErrElicitationNotSupported) || errors.Is(err, server.ErrNoActiveSession),
		// Protocol 2026-07-28 has no server-initiated requests: a question there
		// would have to end the call, and the command waits inside it.
		errors.Is(err, server.ErrServerInitiatedRequestUnsupported):
		return "", fmt.Errorf("%w: %w", ErrCannotAsk, err)
	case err != nil:
		return "", fmt.Errorf("asking about %s: %w", hostport, err)
	case res.Action != mcp.ElicitationResponseActionAccept:
		return ChoiceDeny, nil
	}
	content, _ := res.Content.(map[string]any)
	switch d, _ := content["decision"].(string); d {
	case ChoiceOnce, ChoiceAlways, ChoiceDeny:
		return d, nil
	}
	return "", ErrBadAnswer
}

// questionParams is the question about host:port that command asks for: form mode,
// one field whose choices are ChoiceOnce, ChoiceAlways and ChoiceDeny.
func questionParams(command, host string, port int) mcp.ElicitationParams {
	hostport := host + ":" + strconv.Itoa(port)
	return mcp.ElicitationParams{
		Mode: mcp.ElicitationModeForm,
		Message: fmt.Sprintf("The sandbox's command %q wants to reach %s, which the operator did not allow. Allow it?",
			human.Clip(command, 200), hostport),
		RequestedSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"decision": map[string]any{
					"type":      "string",
					"title":     "Access to " + hostport,
					"enum":      []string{ChoiceOnce, ChoiceAlways, ChoiceDeny},
					"enumNames": []string{"Allow once (this command)", "Allow always", "Deny"},
				},
			},
			"required": []string{"decision"},
		},
	}
}
