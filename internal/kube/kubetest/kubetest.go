// Package kubetest starts what tests of the Kubernetes engine need on the development
// cluster: a client for it (skipping the test without one) and pods that sleep, which
// the tests run their commands in before the engine makes pods of its own.
package kubetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/kube"
)

// Kubeconfig is the development cluster's kubeconfig (MCP_SANDBOX_KUBECONFIG); the
// test skips with -short or when it is unset.
func Kubeconfig(tb testing.TB) string {
	tb.Helper()
	if testing.Short() {
		tb.Skip("needs a Kubernetes cluster: not with -short")
	}
	kc := os.Getenv("MCP_SANDBOX_KUBECONFIG")
	if kc == "" {
		tb.Skip("needs a Kubernetes cluster: MCP_SANDBOX_KUBECONFIG is not set (make test-kube sets it)")
	}
	return kc
}

// Image is the image of test pods: MCP_SANDBOX_KUBE_IMAGE, or the one the development
// cluster has imported.
func Image() string {
	if im := os.Getenv("MCP_SANDBOX_KUBE_IMAGE"); im != "" {
		return im
	}
	return "k8s.local/code-sandbox-test:latest"
}

// Pods is the pods client of namespace ns on the development cluster.
func Pods(tb testing.TB, ns string) corev1.PodInterface {
	tb.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", Kubeconfig(tb))
	if err != nil {
		tb.Fatal(err)
	}
	core, err := corev1.NewForConfig(rc)
	if err != nil {
		tb.Fatal(err)
	}
	return core.Pods(ns)
}

// Pod starts a pod named prefix-<random> whose container "sandbox" sleeps, labelled as
// the engine's own for a container of its name, waits until it runs, and deletes it
// when the test ends.
func Pod(tb testing.TB, pods corev1.PodInterface, prefix string) string {
	tb.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := prefix + "-" + hex.EncodeToString(b)
	f := false
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := pods.Create(ctx, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: kube.OwnerLabels(name)},
		Spec: v1.PodSpec{
			AutomountServiceAccountToken: &f, TerminationGracePeriodSeconds: new(int64),
			Containers: []v1.Container{{Name: "sandbox", Image: Image(), ImagePullPolicy: v1.PullIfNotPresent,
				Command: []string{"/bin/sh", "-c", "exec sleep 2147483647"}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		tb.Fatalf("creating pod %s: %v", name, err)
	}
	tb.Cleanup(func() {
		_ = pods.Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	for {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err == nil && p.Status.Phase == v1.PodRunning {
			return name
		}
		if ctx.Err() != nil {
			tb.Fatalf("pod %s did not run within 2 minutes: %v", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// NotImplemented reports whether err is an engine's answer to a call it does not serve.
func NotImplemented(err error) bool { return cerrdefs.IsNotImplemented(err) }

// PodInspect is the Kubernetes engine with InspectBox answered from the pod: for
// tests of the exec paths, which need no more of a container than that it runs.
type PodInspect struct {
	*kube.Client
	Pods corev1.PodInterface
}

func (e PodInspect) InspectBox(ctx context.Context, name string) (boxapi.Box, error) {
	p, err := e.Pods.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return boxapi.Box{}, err
	}
	image := p.Spec.Containers[0].Image
	return boxapi.Box{ID: string(p.UID), Name: name, ImageID: image, Spec: boxapi.BoxSpec{Image: image},
		State: boxapi.BoxState{Running: p.Status.Phase == v1.PodRunning, Status: "running"}}, nil
}
