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
func (s *Sandbox) catIn(ctx context.Context, tmp string, r io.Reader) (int64, error) {
	execID, hj, err := s.startExec(ctx, container.ExecOptions{
		User: "root", WorkingDir: "/", AttachStdin: true, AttachStdout: true, AttachStderr: true,
		Cmd: []string{"bash", "-c", `exec cat > "$1"`, "upload", tmp},
	})
	if err != nil {
		return 0, err
	}
	defer hj.Close()
	stop := context.AfterFunc(ctx, hj.Close)
	defer stop()
	var stderr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		err := demux(hj.Reader, func([]byte) {}, func(p []byte) {
			if stderr.Len() < 4096 {
				stderr.Write(p)
			}
		})
		// cat ended: if it did before its input did (a full disk), the engine may
		// stop reading the rest without failing the writes.
		hj.Close()
		done <- err
	}()
	src := &readErrs{r: r}
	n, err := io.Copy(hj.Conn, src)
	if err != nil {
		// Closing the stream ends cat, which leaves a partial file for the caller to
		// remove once cat is gone: one that had not started yet when the upload failed
		// would create the file after the removal.
		hj.Close()
		<-done
		s.waitExecEnd(ctx, execID)
		switch {
		case src.err != nil:
			return n, fmt.Errorf("reading upload: %w", src.err)
		case ctx.Err() != nil:
			return n, ctx.Err()
		}
		return n, s.catFailed(ctx, execID, tmp, &stderr)
	}
	// A cat that failed already (a full disk) may have ended the stream: its exit
	// status and words tell why, not this error.
	cerr := hj.CloseWrite()
	derr := <-done
	code, ok := s.exitCode(ctx, execID, false)
	switch {
	case ok && code != 0:
		return n, s.catFailed(ctx, execID, tmp, &stderr)
	case cerr != nil:
		return n, fmt.Errorf("ending upload stream: %w", cerr)
	case derr != nil:
		return n, fmt.Errorf("writing into the sandbox: %w", derr)
	case !ok:
		return n, s.catFailed(ctx, execID, tmp, &stderr)
	}
	return n, nil
}

// catFailed reports a cat that did not write the whole upload, in its own words.
func (s *Sandbox) catFailed(ctx context.Context, execID, tmp string, stderr *bytes.Buffer) error {
	code, _ := s.exitCode(ctx, execID, false)
	return fmt.Errorf("writing %s in the sandbox failed (exit code %d): %s", tmp, code, human.Clip(strings.TrimSpace(stderr.String()), 300))
}

// waitExecEnd waits (a while at most) until the exec has started and ended.
func (s *Sandbox) waitExecEnd(ctx context.Context, execID string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), uploadStepTimeout)
	defer cancel()
	if st, ok := s.agentStream(execID); ok {
		agentExitCode(ctx, st, uploadStepTimeout)
		return
	}
	for ctx.Err() == nil {
		ins, err := s.cli.ContainerExecInspect(ctx, execID)
		if err != nil || (!ins.Running && ins.Pid != 0) {
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
