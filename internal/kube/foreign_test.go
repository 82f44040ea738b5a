package kube_test

import (
	"context"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	v1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestForeignPod: a pod named like a container that the engine did not make (another
// workload in the namespace) is never taken for the container's: a start fails
// naming it instead of reporting the container started (which would make the sandbox
// run its commands in that pod), and stop and remove leave it alone.
func TestForeignPod(t *testing.T) {
	cl := needCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c := cl.engine(t, "IfNotPresent")
	const name = "kreview-foreign"
	pods := cl.admin.CoreV1().Pods(cl.ns)
	no := false
	foreign, err := pods.Create(ctx, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "someone-else"}},
		Spec: v1.PodSpec{
			AutomountServiceAccountToken: &no, TerminationGracePeriodSeconds: new(int64),
			Containers: []v1.Container{{Name: "sandbox", Image: testImage, ImagePullPolicy: v1.PullIfNotPresent,
				Command: []string{"/bin/sh", "-c", "exec sleep 2147483647"}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err == nil && p.Status.Phase == v1.PodRunning {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the foreign pod did not run: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, _, err := c.CreateBox(ctx, name, sandboxSpec(nil)); err != nil {
		t.Fatal(err)
	}
	still := func(what string) {
		t.Helper()
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil || p.UID != foreign.UID || p.DeletionTimestamp != nil {
			t.Fatalf("after %s the foreign pod is gone or going: %v", what, err)
		}
	}
	err = c.StartBox(ctx, name)
	if !cerrdefs.IsConflict(err) || !strings.Contains(err.Error(), "not made by this engine") {
		t.Fatalf("start with a foreign pod of the same name: %v, want a conflict naming it", err)
	}
	still("start")
	if info, err := c.InspectBox(ctx, name); err == nil && info.State.Running {
		t.Fatalf("inspect takes the foreign pod for the container's: %+v", info.State)
	}
	// Nothing is run in it either, whoever asks for an exec by the container's name.
	if _, err := c.StartProcess(ctx, name, boxapi.ProcessSpec{Argv: []string{"true"}, Stdout: true}); !cerrdefs.IsConflict(err) || !strings.Contains(err.Error(), "not made by this engine") {
		t.Errorf("exec in the foreign pod: %v, want a conflict naming it", err)
	}
	if _, err := c.StatPath(ctx, name, "/"); !cerrdefs.IsConflict(err) || !strings.Contains(err.Error(), "not made by this engine") {
		t.Errorf("stat in the foreign pod: %v, want a conflict naming it", err)
	}
	if err := c.CopyIn(ctx, name, "/tmp", strings.NewReader("")); !cerrdefs.IsConflict(err) {
		t.Errorf("copy into the foreign pod: %v, want a conflict", err)
	}
	if err := c.StopBox(ctx, name, 2*time.Second); !cerrdefs.IsConflict(err) {
		t.Errorf("stop: %v, want a conflict", err)
	}
	still("stop")
	if err := c.KillBox(ctx, name); !cerrdefs.IsConflict(err) {
		t.Errorf("kill: %v, want a conflict", err)
	}
	still("kill")
	if err := c.RemoveBox(ctx, name); !cerrdefs.IsConflict(err) {
		t.Errorf("forced remove: %v, want a conflict", err)
	}
	still("remove")
	// Once the other pod is gone the container is the engine's again.
	zero := int64(0)
	if err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := pods.Get(ctx, name, metav1.GetOptions{}); err != nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the foreign pod was not deleted")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := c.RemoveBox(context.WithoutCancel(ctx), name); err != nil {
		t.Errorf("remove once the foreign pod is gone: %v", err)
	}
}

// TestStartReplacesEndedPod: a pod that ended for good (evicted: phase Failed, left
// until collected) does not fail the next start, which makes a new pod.
func TestStartReplacesEndedPod(t *testing.T) {
	cl := needCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c := cl.engine(t, "IfNotPresent")
	const name = "kreview-ended"
	if _, _, err := c.CreateBox(ctx, name, sandboxSpec(nil)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.RemoveBox(context.Background(), name) })
	pods := cl.admin.CoreV1().Pods(cl.ns)
	no := false
	ended, err := pods.Create(ctx, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"app.kubernetes.io/managed-by": "caddy-mcp-sandbox", "mcp-sandbox.container": name, "mcp-sandbox.pod": name}},
		Spec: v1.PodSpec{
			AutomountServiceAccountToken: &no, TerminationGracePeriodSeconds: new(int64), RestartPolicy: v1.RestartPolicyNever,
			Containers: []v1.Container{{Name: "sandbox", Image: testImage, ImagePullPolicy: v1.PullIfNotPresent,
				Command: []string{"/bin/sh", "-c", "exit 1"}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err == nil && p.Status.Phase == v1.PodFailed {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the pod did not end: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if info, err := c.InspectBox(ctx, name); err != nil || info.State.Running {
		t.Fatalf("inspect of an ended pod: %v %+v", err, info.State)
	}
	if err := c.StartBox(ctx, name); err != nil {
		t.Fatalf("start over an ended pod: %v", err)
	}
	p, err := pods.Get(ctx, name, metav1.GetOptions{})
	if err != nil || p.UID == ended.UID || p.Status.Phase != v1.PodRunning {
		t.Fatalf("after the start: %v, want a new running pod", err)
	}
}

// TestForeignClaim: a claim named like a volume that the engine did not make is
// never mounted into a sandbox (which would hand another workload's files to the
// person), nor removed.
func TestForeignClaim(t *testing.T) {
	cl := needCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := cl.engine(t, "IfNotPresent")
	const name = "kreview-claim"
	pvcs := cl.admin.CoreV1().PersistentVolumeClaims(cl.ns)
	foreign, err := pvcs.Create(ctx, &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "someone-else"}},
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources:   v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("16Mi")}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CreateVolume(ctx, name, nil); !cerrdefs.IsConflict(err) || !strings.Contains(err.Error(), "not made by this engine") {
		t.Errorf("volume create over a foreign claim: %v, want a conflict naming it", err)
	}
	sp := sandboxSpec(nil)
	sp.Mounts = []boxapi.Mount{{Volume: name, Source: name, Destination: "/sandbox"}}
	if _, _, err := c.CreateBox(ctx, "kreview-claim-box", sp); !cerrdefs.IsConflict(err) {
		t.Errorf("a container mounting a foreign claim: %v, want a conflict", err)
	}
	if _, err := c.InspectVolume(ctx, name); !cerrdefs.IsConflict(err) {
		t.Errorf("inspect of a foreign claim: %v, want a conflict", err)
	}
	if err := c.RemoveVolume(ctx, name, true); !cerrdefs.IsConflict(err) {
		t.Errorf("forced remove of a foreign claim: %v, want a conflict", err)
	}
	got, err := pvcs.Get(ctx, name, metav1.GetOptions{})
	if err != nil || got.UID != foreign.UID || got.DeletionTimestamp != nil {
		t.Fatalf("the foreign claim is gone or going: %v", err)
	}
}

// TestForeignPolicy: a network policy named like a container's that the engine did
// not make (it selects other pods) fails the start of a container without network
// instead of leaving its pod unisolated, and removing the container leaves it alone.
func TestForeignPolicy(t *testing.T) {
	cl := needCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := cl.engine(t, "IfNotPresent")
	const name = "kreview-np"
	nps := cl.admin.NetworkingV1().NetworkPolicies(cl.ns)
	foreign, err := nps.Create(ctx, &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-no-network"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "someone-else"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	noNet := sandboxSpec(nil)
	noNet.NetworkMode = "none"
	if _, _, err := c.CreateBox(ctx, name, noNet); err != nil {
		t.Fatal(err)
	}
	err = c.StartBox(ctx, name)
	if !cerrdefs.IsConflict(err) || !strings.Contains(err.Error(), "network policy") {
		t.Errorf("start beside a foreign policy of the container's name: %v, want a conflict naming it", err)
	}
	if err := c.RemoveBox(ctx, name); err != nil {
		t.Fatal(err)
	}
	got, err := nps.Get(ctx, foreign.Name, metav1.GetOptions{})
	if err != nil || got.UID != foreign.UID {
		t.Fatalf("the foreign policy is gone: %v", err)
	}
}
