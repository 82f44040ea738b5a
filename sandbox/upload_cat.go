// The general path of an upload: the bytes through the standard input of `cat` in an
// exec, for streams of unknown length and directories off the volume.

package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
)

// catIn streams r into the file tmp through the standard input of `cat`, for streams
// whose length is not known in advance and directories off the volume.
func (s *fileStore) catIn(ctx context.Context, tmp string, r io.Reader) (int64, error) {
	p, err := s.sb.runner.startExec(ctx, container.ExecOptions{
		User: "root", WorkingDir: "/", AttachStdin: true, AttachStdout: true, AttachStderr: true,
		Cmd: []string{"bash", "-c", `exec cat > "$1"`, "upload", tmp},
	})
	if err != nil {
		return 0, err
	}
	defer p.Close()
	stop := context.AfterFunc(ctx, func() { _ = p.Close() })
	defer stop()
	var stderr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		err := drain(p, func([]byte) {}, func(b []byte) {
			if stderr.Len() < 4096 {
				stderr.Write(b)
			}
		})
		// cat ended: if it did before its input did (a full disk), the engine may
		// stop reading the rest without failing the writes.
		_ = p.Close()
		done <- err
	}()
	src := &readErrs{r: r}
	n, err := io.Copy(p, src)
	if err != nil {
		// Closing the stream ends cat, which leaves a partial file for the caller to
		// remove once cat is gone: one that had not started yet when the upload failed
		// would create the file after the removal.
		_ = p.Close()
		<-done
		s.waitExecEnd(ctx, p)
		switch {
		case src.err != nil:
			return n, fmt.Errorf("reading upload: %w", src.err)
		case ctx.Err() != nil:
			return n, ctx.Err()
		}
		return n, catFailed(ctx, p, tmp, &stderr)
	}
	// A cat that failed already (a full disk) may have ended the stream: its exit
	// status and words tell why, not this error.
	cerr := p.CloseWrite()
	derr := <-done
	code, ok := p.exitCode(ctx, false)
	switch {
	case ok && code != 0:
		return n, catFailed(ctx, p, tmp, &stderr)
	case cerr != nil:
		return n, fmt.Errorf("ending upload stream: %w", cerr)
	case derr != nil:
		return n, fmt.Errorf("writing into the sandbox: %w", derr)
	case !ok:
		return n, catFailed(ctx, p, tmp, &stderr)
	}
	return n, nil
}

// catFailed reports a cat that did not write the whole upload, in its own words.
func catFailed(ctx context.Context, p proc, tmp string, stderr *bytes.Buffer) error {
	code, _ := p.exitCode(ctx, false)
	return fmt.Errorf("writing %s in the sandbox failed (exit code %d): %s", tmp, code, human.Clip(strings.TrimSpace(stderr.String()), 300))
}

// waitExecEnd waits (a while at most) until the exec has started and ended.
func (s *fileStore) waitExecEnd(ctx context.Context, p proc) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), uploadStepTimeout)
	defer cancel()
	d, ok := p.(*dockerProc)
	if !ok {
		p.exitCode(ctx, false)
		return
	}
	for ctx.Err() == nil {
		ins, err := dockerOf(s.cli).ContainerExecInspect(ctx, d.id)
		// An engine's execs without pids (Kubernetes) run from their attach on.
		if err != nil || (!ins.Running && (ins.Pid != 0 || !s.caps().ExecPIDs)) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readErrs notes the error of its reader, to tell it from a failed write.
type readErrs struct {
	r   io.Reader
	err error
}

func (e *readErrs) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF {
		e.err = err
	}
	return n, err
}
