package mcptools

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
	"go.uber.org/zap"
)

// Checkpoints is what a Box offers when it can save and restore itself.
type Checkpoints interface {
	// SaveCheckpoint saves the whole sandbox; dropped are the oldest checkpoints it
	// removed to stay within max_checkpoints.
	SaveCheckpoint(ctx context.Context, name string) (saved boxapi.Checkpoint, dropped []boxapi.Checkpoint, err error)
	// ListCheckpoints lists the sandbox's own checkpoints, oldest first.
	ListCheckpoints(ctx context.Context) ([]boxapi.Checkpoint, error)
	// RestoreCheckpoint makes the sandbox one of its own checkpoints, or, for
	// boxapi.ImageReset, the configured image keeping /sandbox. Another sandbox's id
	// is boxapi.ErrCheckpointNotFound.
	RestoreCheckpoint(ctx context.Context, id string) error
}

// checkpointEntry is one checkpoint as the model sees it.
type checkpointEntry struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	SizeBytes int64     `json:"size_bytes"`
	CreatedAt time.Time `json:"created_at"`
}

type checkpointListOutput struct {
	Checkpoints []checkpointEntry `json:"checkpoints"`
}

type checkpointOutput struct {
	ID          string            `json:"id"`
	Name        string            `json:"name"`
	SizeBytes   int64             `json:"size_bytes"`
	CreatedAt   time.Time         `json:"created_at"`
	Seconds     float64           `json:"seconds"`
	Dropped     []string          `json:"dropped,omitempty" jsonschema:"Ids of the oldest checkpoints removed to stay within the limit."`
	Checkpoints []checkpointEntry `json:"checkpoints"`
}

type restoreOutput struct {
	ID      string  `json:"id"`
	Seconds float64 `json:"seconds"`
}

// checkpointArgs are checkpoint's arguments.
type checkpointArgs struct {
	Name string `json:"name"`
}

// restoreArgs are restore's arguments.
type restoreArgs struct {
	ID string `json:"id" arg:"required,pattern=^(c[0-9a-f]{14}|image)$" needs:"a checkpoint id like c6940a1f03f2a1b from checkpoint_list, or \"image\""`
}

// addCheckpointTools registers checkpoint, checkpoint_list and restore.
func (s *Tools) addCheckpointTools(m *server.MCPServer) {
	addTool(s, m, define[checkpointArgs](mcp.NewTool("checkpoint",
		mcp.WithDescription(`Save the whole sandbox: installed packages and every file outside /sandbox, and /sandbox itself. Running processes and jobs are not kept. Returns its id for restore. Save before risky changes (system installs, upgrades, migrations, deletions). The oldest checkpoints beyond the operator's limit are removed.`),
		title("Save a checkpoint of the sandbox"),
		outputSchema[checkpointOutput](),
		hints(false, false, false, false),
	), map[string]about{"name": {desc: "A short label, e.g. before-upgrade."}}), s.checkpoint)
	addTool(s, m, define[noArgs](mcp.NewTool("checkpoint_list",
		mcp.WithDescription(`List this sandbox's checkpoints, oldest first.`),
		title("List checkpoints"),
		outputSchema[checkpointListOutput](),
		hints(true, false, true, false),
	), nil), s.checkpointList)
	addTool(s, m, define[restoreArgs](mcp.NewTool("restore",
		mcp.WithDescription(`Make the sandbox exactly a checkpoint again: the system and /sandbox. Every running process and job ends (jobs show as lost); what changed since the checkpoint is gone. id "image" instead resets the system to the original image and keeps /sandbox as it is.`),
		title("Restore a checkpoint"),
		outputSchema[restoreOutput](),
		hints(false, true, true, false),
	), map[string]about{"id": {desc: `From checkpoint or checkpoint_list, or "image".`}}), s.restore)
}

// checkpointsOf is box's checkpoints, or the result saying there are none here.
func checkpointsOf(box Box) (Checkpoints, *mcp.CallToolResult) {
	c, ok := box.(Checkpoints)
	if !ok {
		return nil, mcp.NewToolResultError("Checkpoints are not available for this sandbox.")
	}
	return c, nil
}

func entries(list []boxapi.Checkpoint) []checkpointEntry {
	out := make([]checkpointEntry, 0, len(list))
	for _, c := range list {
		out = append(out, checkpointEntry{ID: c.ID, Name: c.Name, SizeBytes: c.SizeBytes, CreatedAt: c.CreatedAt})
	}
	return out
}

// checkpointLine is one checkpoint as text.
func checkpointLine(c checkpointEntry) string {
	name := ""
	if c.Name != "" {
		name = fmt.Sprintf(" %q", c.Name)
	}
	return fmt.Sprintf("%s%s  %s  %s", c.ID, name, human.Size(c.SizeBytes), c.CreatedAt.Format(time.RFC3339))
}

// checkpointError turns an error of the checkpoint calls into a result saying what to do.
func checkpointError(box Box, err error, id string) *mcp.CallToolResult {
	switch {
	case errors.Is(err, boxapi.ErrCheckpointNotFound):
		return mcp.NewToolResultError(fmt.Sprintf("There is no checkpoint %s in this sandbox. Call checkpoint_list to see its checkpoints.", id))
	case errors.Is(err, boxapi.ErrNoSandbox):
		return mcp.NewToolResultError("There is nothing to save yet: the sandbox has not run. Run a command first.")
	case errors.Is(err, boxapi.ErrCheckpointEmpty):
		return mcp.NewToolResultError("Checkpoints cannot be saved in this sandbox, nothing was saved: " + err.Error() + ". That is for the server's operator to fix; tell the user.")
	case box.EngineDown(err), errors.Is(err, boxapi.ErrImageMissing):
		return mcp.NewToolResultError(execErrorText(box, err))
	}
	return mcp.NewToolResultError("It did not work: " + err.Error() + ".")
}

func (s *Tools) checkpoint(ctx context.Context, box Box, _ call, in checkpointArgs) (*mcp.CallToolResult, error) {
	cb, fail := checkpointsOf(box)
	if fail != nil {
		return fail, nil
	}
	name := strings.TrimSpace(in.Name)
	if len(name) > boxapi.MaxCheckpointName || strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return mcp.NewToolResultError(fmt.Sprintf("checkpoint's name is a short label on one line, at most %d bytes, e.g. before-upgrade.", boxapi.MaxCheckpointName)), nil
	}
	begin := time.Now()
	ck, dropped, err := cb.SaveCheckpoint(ctx, name)
	if err != nil {
		return checkpointError(box, err, ""), nil
	}
	list, err := cb.ListCheckpoints(ctx)
	if err != nil {
		list = []boxapi.Checkpoint{ck}
	}
	out := checkpointOutput{ID: ck.ID, Name: ck.Name, SizeBytes: ck.SizeBytes, CreatedAt: ck.CreatedAt,
		Seconds: roundSeconds(time.Since(begin)), Checkpoints: entries(list)}
	var b strings.Builder
	fmt.Fprintf(&b, "Saved checkpoint %s (%s) in %.1fs. Restore it with restore(id: %q).", ck.ID, human.Size(ck.SizeBytes), out.Seconds, ck.ID)
	for _, d := range dropped {
		out.Dropped = append(out.Dropped, d.ID)
	}
	if len(dropped) > 0 {
		fmt.Fprintf(&b, "\n[note: the limit of checkpoints was reached, so the oldest was removed: %s]", strings.Join(out.Dropped, ", "))
	}
	b.WriteString("\nCheckpoints:")
	for _, c := range out.Checkpoints {
		b.WriteString("\n" + checkpointLine(c))
	}
	ident := CallerFrom(ctx)
	s.opts.Logger.Info("checkpoint", zap.String("person", ident.Person), zap.String("container", ident.Container),
		zap.String("id", ck.ID), zap.Int64("bytes", ck.SizeBytes), zap.Strings("dropped", out.Dropped))
	return mcp.NewToolResultStructured(out, b.String()), nil
}

func (s *Tools) checkpointList(ctx context.Context, box Box, _ call, _ noArgs) (*mcp.CallToolResult, error) {
	cb, fail := checkpointsOf(box)
	if fail != nil {
		return fail, nil
	}
	list, err := cb.ListCheckpoints(ctx)
	if err != nil {
		return checkpointError(box, err, ""), nil
	}
	out := checkpointListOutput{Checkpoints: entries(list)}
	var b strings.Builder
	for _, c := range out.Checkpoints {
		b.WriteString(checkpointLine(c) + "\n")
	}
	if len(list) == 0 {
		b.WriteString("No checkpoints. Save one with checkpoint.")
	}
	return mcp.NewToolResultStructured(out, strings.TrimRight(b.String(), "\n")), nil
}

func (s *Tools) restore(ctx context.Context, box Box, _ call, in restoreArgs) (*mcp.CallToolResult, error) {
	cb, fail := checkpointsOf(box)
	if fail != nil {
		return fail, nil
	}
	id := in.ID
	begin := time.Now()
	// The restore goes on when the client gives up: stopping halfway would leave
	// nothing better than finishing.
	if err := cb.RestoreCheckpoint(context.WithoutCancel(ctx), id); err != nil {
		return checkpointError(box, err, id), nil
	}
	out := restoreOutput{ID: id, Seconds: roundSeconds(time.Since(begin))}
	ident := CallerFrom(ctx)
	s.opts.Logger.Info("restore", zap.String("person", ident.Person), zap.String("container", ident.Container), zap.String("id", id))
	text := fmt.Sprintf("Restored checkpoint %s in %.1fs: the system and /sandbox are as they were saved; every process that was running before has ended.", id, out.Seconds)
	if id == boxapi.ImageReset {
		text = fmt.Sprintf("Reset the system to the original image in %.1fs; /sandbox is kept; every process that was running before has ended.", out.Seconds)
	}
	return mcp.NewToolResultStructured(out, text), nil
}

func roundSeconds(d time.Duration) float64 {
	return float64(d.Round(10*time.Millisecond)) / float64(time.Second)
}
