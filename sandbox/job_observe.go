package sandbox

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// RunningJobs lists the jobs running now, oldest first, for an observer such as an
// operator's page. Unlike [Sandbox.ListJobs] it never creates, starts or repairs the
// container: with none running, no job runs, and the list is empty.
func (s *Sandbox) RunningJobs(ctx context.Context) ([]boxapi.JobInfo, error) {
	jobs, err := s.ListJobs(upkeep(ctx))
	if errors.Is(err, errNotRunning) {
		return []boxapi.JobInfo{}, nil
	}
	if err != nil {
		return nil, err
	}
	running := make([]boxapi.JobInfo, 0, len(jobs))
	for _, j := range jobs {
		if j.State == "running" {
			running = append(running, j)
		}
	}
	return running, nil
}

// StopJob kills a running job as [Sandbox.KillJob] does, for an observer: it never
// creates, starts or repairs the container. It returns an error wrapping
// [boxapi.ErrJobNotFound] when no such job runs: unknown, ended, or no container running.
func (s *Sandbox) StopJob(ctx context.Context, id string) error {
	if !boxapi.ValidJobID(id) {
		return fmt.Errorf("%w: %q is not a job id", boxapi.ErrJobNotFound, id)
	}
	// The job runner remembers that a job was killed, so KillJob's answer cannot tell
	// a job killed now from one killed before: ask first whether it runs.
	jobs, err := s.RunningJobs(ctx)
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(jobs, func(j boxapi.JobInfo) bool { return j.ID == id }) {
		return fmt.Errorf("%w: %s is not running", boxapi.ErrJobNotFound, id)
	}
	_, err = s.KillJob(upkeep(ctx), id, 0)
	return err
}
