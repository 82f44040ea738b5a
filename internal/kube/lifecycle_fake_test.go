package kube

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// kubelet makes the fake clientset's pods behave as a node would: a pod is running
// and its container ready as soon as it is made, unless waitReason says the container
// waits for that reason instead.
func kubelet(cs *fake.Clientset, waitReason string) {
	// The API server gives every object a UID; the fake tracker gives none.
	cs.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if m, err := meta.Accessor(a.(k8stesting.CreateAction).GetObject()); err == nil && m.GetUID() == "" {
			m.SetUID(ktypes.UID(fmt.Sprintf("uid-%s-%d", m.GetName(), time.Now().UnixNano())))
		}
		return false, nil, nil
	})
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.CreateAction).GetObject().(*v1.Pod)
		st := v1.ContainerStatus{Name: containerName}
		if waitReason != "" {
			p.Status.Phase = v1.PodPending
			st.State.Waiting = &v1.ContainerStateWaiting{Reason: waitReason, Message: "from the fake kubelet"}
		} else {
			p.Status.Phase = v1.PodRunning
			st.Ready = true
			st.State.Running = &v1.ContainerStateRunning{StartedAt: metav1.NewTime(time.Now().Truncate(time.Second))}
		}
		p.Status.ContainerStatuses = []v1.ContainerStatus{st}
		return false, nil, nil // the tracker stores it as changed
	})
}

// fakeEngine is a Client over a fake clientset whose pods start at once.
func fakeEngine(t *testing.T, waitReason string) (*Client, *fake.Clientset) {
	t.Helper()
	c, cs, _ := fakeClient(t)
	c.net = cs.NetworkingV1()
	c.cfg.Name = "fake"
	kubelet(cs, waitReason)
	return c, cs
}

// TestLifecycleFake: the engine's logic over client-go's fake clientset, no cluster:
// a container is a record until started, a pod while it runs, and its network mode a
// policy; stop ends the pod and keeps the container; remove takes it all; a name in
// use and a missing container say so.
func TestLifecycleFake(t *testing.T) {
	c, cs := fakeEngine(t, "")
	ctx := t.Context()
	sp := boxapi.BoxSpec{Image: "k8s.local/img:1", Labels: map[string]string{"mcp-sandbox.person": "alice"},
		Entrypoint: []string{"bash", "-c", "sleep infinity"}, NetworkMode: "none",
		Mounts: []boxapi.Mount{{Volume: "box-data", Source: "box-data", Destination: "/sandbox"}}}
	id, _, err := c.CreateBox(ctx, "box", sp)
	if err != nil || id == "" {
		t.Fatalf("create: %q %v", id, err)
	}
	if _, err := cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, "box-data", metav1.GetOptions{}); err != nil {
		t.Errorf("the mounted volume's claim was not made: %v", err)
	}
	if _, _, err := c.CreateBox(ctx, "box", sp); !cerrdefs.IsConflict(err) || !strings.Contains(err.Error(), "already in use") {
		t.Errorf("a second create of box: %v, want a conflict saying the name is in use", err)
	}
	info, err := c.InspectBox(ctx, "box")
	if err != nil || info.State.Running || info.Spec.Image != "k8s.local/img:1" || info.Spec.Labels["mcp-sandbox.person"] != "alice" {
		t.Fatalf("inspect of the created container: %+v %v", info, err)
	}

	if err := c.StartBox(ctx, "box"); err != nil {
		t.Fatalf("start: %v", err)
	}
	info, err = c.InspectBox(ctx, "box")
	if err != nil || !info.State.Running {
		t.Fatalf("inspect of the started container: %+v %v", info.State, err)
	}
	if _, err := cs.NetworkingV1().NetworkPolicies("default").Get(ctx, networkPolicyName("box"), metav1.GetOptions{}); err != nil {
		t.Errorf("network none made no deny-all policy: %v", err)
	}
	list, err := c.ListBoxes(ctx, "mcp-sandbox.person=alice")
	if err != nil || len(list) != 1 || list[0].Status != "running" {
		t.Fatalf("list by label: %+v %v", list, err)
	}
	if err := c.ContainerRunning(ctx, "box"); err != nil {
		t.Errorf("ContainerRunning of the started container: %v", err)
	}

	if err := c.StopBox(ctx, "box", terminationGrace*time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := cs.CoreV1().Pods("default").Get(ctx, "box", metav1.GetOptions{}); err == nil {
		t.Error("the pod is left after a stop")
	}
	info, err = c.InspectBox(ctx, "box")
	if err != nil || info.State.Running {
		t.Fatalf("inspect after the stop: %+v %v", info.State, err)
	}
	if err := c.ContainerRunning(ctx, "box"); !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
		t.Errorf("ContainerRunning of the stopped container: %v", err)
	}

	if err := c.RemoveBox(ctx, "box"); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if _, err := c.InspectBox(ctx, "box"); !cerrdefs.IsNotFound(err) {
		t.Errorf("inspect of the removed container: %v, want not found", err)
	}
	if _, err := cs.NetworkingV1().NetworkPolicies("default").Get(ctx, networkPolicyName("box"), metav1.GetOptions{}); err == nil {
		t.Error("the removed container's policy is left")
	}
	if err := c.StartBox(ctx, "nosuch"); !cerrdefs.IsNotFound(err) {
		t.Errorf("start of a missing container: %v, want not found", err)
	}
}

// TestStartRefusedFake: a pod whose container cannot start (an image the node cannot
// pull) fails the start at once with the reason and what to do, and the pod goes; the
// container stays created.
func TestStartRefusedFake(t *testing.T) {
	c, cs := fakeEngine(t, "ErrImageNeverPull")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, _, err := c.CreateBox(ctx, "box", boxapi.BoxSpec{Image: "k8s.local/missing:1"}); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	err := c.StartBox(ctx, "box")
	if !cerrdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "import it on the nodes") {
		t.Fatalf("start with an image the node lacks: %v, want a failed precondition saying what to do", err)
	}
	if d := time.Since(begin); d > 10*time.Second {
		t.Errorf("the refusal took %v", d)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := cs.CoreV1().Pods("default").Get(ctx, "box", metav1.GetOptions{}); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the pod of the refused start is left")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := c.InspectBox(ctx, "box"); err != nil {
		t.Errorf("the container is gone after a refused start: %v", err)
	}
}
