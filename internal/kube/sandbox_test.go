package kube_test

import (
	"context"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// TestSandboxLifecycle drives the engine through the sandbox package: a sandbox is
// made, stopped, started, listed and deleted with its volume. (Commands are the exec
// part's to test.)
func TestSandboxLifecycle(t *testing.T) {
	cl := needCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	c := cl.engine(t, "IfNotPresent")
	cfg := sandbox.DefaultConfig()
	cfg.Image, cfg.Container, cfg.Volume = testImage, "sb-ann", "sb-ann-data"
	cfg.Memory, cfg.CPUs = 256<<20, 0.5
	sb, err := sandbox.New(c, cfg, zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.CloseTransfers()
	state := func(want string) {
		t.Helper()
		st, err := sb.Status(ctx)
		// Without a metrics API a running sandbox has no CPU and memory figures.
		if err != nil && !cerrdefs.IsNotImplemented(err) {
			t.Fatalf("status: %v", err)
		}
		if !st.Exists || st.State != want || st.MemoryLimit != 256<<20 || st.CPULimit != 0.5 {
			t.Fatalf("status %+v, want state %s and the configured limits", st, want)
		}
	}
	if err := sb.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	state("running")
	if err := sb.Stop(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	state("exited")
	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	state("running")
	if n, err := sandbox.Count(ctx, c); err != nil || n != 1 {
		t.Errorf("count %d: %v", n, err)
	}
	list, err := sandbox.Containers(ctx, c)
	if err != nil || len(list) != 1 || list[0].Name != "sb-ann" || list[0].Volume != "sb-ann-data" || list[0].State != "running" {
		t.Errorf("containers %+v: %v", list, err)
	}
	if err := sb.Delete(ctx, true); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.admin.CoreV1().PersistentVolumeClaims(cl.ns).Get(ctx, "sb-ann-data", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("claim after delete: %v", err)
	}
	if _, err := cl.admin.CoreV1().ConfigMaps(cl.ns).Get(ctx, "sb-ann", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("config map after delete: %v", err)
	}
	if ok, err := sandbox.Exists(ctx, c, "sb-ann"); ok || err != nil {
		t.Errorf("exists after delete: %v %v", ok, err)
	}
}
