package fleet

import (
	"context"
	"errors"
	"fmt"
	"net"

	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// What runs in the fleet's sandboxes: the jobs of each, and the connections into
// them that previews relay.

// WhoseSandbox names person's sandbox ("" the operator's) in messages.
func WhoseSandbox(person string) string {
	if person == "" {
		return "the operator's sandbox"
	}
	return person + "'s sandbox"
}

// Container is the name of person's container ("" the operator's), as PersonConfig
// makes it, without asking whether person is configured.
func (f *Fleet) Container(person string) string {
	name := f.operator.Sandbox().Config().Container
	if person == "" {
		return name
	}
	return name + "-" + person
}

// Job is a job running in person's sandbox ("" the operator's).
type Job struct {
	Person string
	boxapi.JobInfo
}

// Jobs are the running jobs of the sandboxes of people ("" the operator's; none: the
// operator's and every configured person's). Looking never starts a container: one
// that does not run has no jobs. A sandbox that does not answer is in the error, the
// others' jobs are listed.
func (f *Fleet) Jobs(ctx context.Context, people ...string) ([]Job, error) {
	if len(people) == 0 {
		people = append([]string{""}, f.People()...)
	}
	out := make([]Job, 0)
	var errs []error
	for _, p := range people {
		sb, err := f.Running(ctx, p)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", WhoseSandbox(p), err))
			continue
		}
		if sb == nil {
			continue
		}
		js, err := sb.RunningJobs(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", WhoseSandbox(p), err))
		}
		for _, j := range js {
			out = append(out, Job{Person: p, JobInfo: j})
		}
	}
	return out, errors.Join(errs...)
}

// KillJob kills job id in person's sandbox, if that sandbox runs. A person not
// configured, a sandbox that does not run and a job it does not have are ErrNotFound.
func (f *Fleet) KillJob(ctx context.Context, person, id string) error {
	sb, err := f.Running(ctx, person)
	if err != nil || sb == nil {
		if err == nil || errors.Is(err, ErrNotConfigured) {
			err = ErrNotFound
		}
		return err
	}
	err = sb.StopJob(ctx, id)
	if errors.Is(err, boxapi.ErrJobNotFound) {
		return ErrNotFound
	}
	if err == nil {
		f.logger.Info("job killed from the console", zap.String("person", person),
			zap.String("container", sb.Config().Container), zap.String("job", id))
	}
	return err
}

// DialPort opens a connection to port on the loopback of e's container, through the
// Docker API. Opening it, and every byte through it, is a use of the sandbox: a
// preview in use keeps it from idle stop.
func (e *Entry) DialPort(ctx context.Context, port int) (net.Conn, error) {
	c, err := e.Sandbox().DialPort(ctx, port)
	if err != nil {
		return nil, err
	}
	return &usedConn{Conn: c, e: e}, nil
}

// usedConn is a connection into a sandbox that records each read and write as a use
// of it. A kept-alive relay serves many requests, a WebSocket many messages.
type usedConn struct {
	net.Conn
	e *Entry
}

func (c *usedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.e.Touch()
	}
	return n, err
}

func (c *usedConn) Write(p []byte) (int, error) {
	c.e.Touch()
	return c.Conn.Write(p)
}

// CloseWrite half-closes the connection, as the reverse proxy does when one side ends.
func (c *usedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}
