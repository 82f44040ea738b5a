package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// BenchmarkConcurrentSleeps runs 50 execute("sleep 1") calls at once through Caddy and
// reports how long until all 50 answered, next to 50 raw Docker API execs of `sleep 1`
// at once in the same run (the target: under 1.5 s through Caddy). The sandbox gets two
// CPUs, this machine's all: with the tests' usual one, the 50 bash starts queue on the
// container's CPU quota rather than on anything of the plugin's.
func BenchmarkConcurrentSleeps(b *testing.B) {
	const n = 50
	s := testsite.Start(b, testsite.Options{Directive: []string{"max_jobs 64"}, CPUs: "2"})
	ctx := context.Background()
	c := s.Client(ctx)
	testsite.Call(ctx, b, c, "execute", map[string]any{"command": "true"})
	var raw, full time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		parallel(b, n, func() error {
			id, err := s.Docker.ContainerExecCreate(ctx, s.Container, container.ExecOptions{Cmd: []string{"sleep", "1"}, AttachStdout: true})
			if err != nil {
				return err
			}
			resp, err := s.Docker.ContainerExecAttach(ctx, id.ID, container.ExecAttachOptions{})
			if err != nil {
				return err
			}
			defer resp.Close()
			_, err = resp.Reader.ReadByte() // EOF at the end
			if _, ierr := s.Docker.ContainerExecInspect(ctx, id.ID); ierr != nil {
				return ierr
			}
			_ = err
			return nil
		})
		t1 := time.Now()
		parallel(b, n, func() error {
			res := testsite.Call(ctx, b, c, "execute", map[string]any{"command": "sleep 1; echo done"})
			if res.IsError || testsite.ResultText(res) == "" || testsite.Structured(b, res)["exit_code"] != float64(0) {
				return fmt.Errorf("wrong result: %s", testsite.ResultText(res))
			}
			return nil
		})
		t2 := time.Now()
		raw += t1.Sub(t0)
		full += t2.Sub(t1)
	}
	b.StopTimer()
	b.ReportMetric(raw.Seconds()/float64(b.N), "raw-s/50")
	b.ReportMetric(full.Seconds()/float64(b.N), "caddy-s/50")
}

// parallel runs f n times at once and fails on the first error.
func parallel(b *testing.B, n int, f func() error) {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}
