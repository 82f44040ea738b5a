package kube

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// fakeClient is a Client over client-go's fake clientset holding objs, and a count of
// the pod reads made through it.
func fakeClient(t *testing.T, objs ...runtime.Object) (*Client, *fake.Clientset, *atomic.Int64) {
	t.Helper()
	cs := fake.NewClientset(objs...)
	var gets atomic.Int64
	cs.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets.Add(1)
		return false, nil, nil
	})
	return &Client{cfg: Config{Name: "fake"}, core: cs.CoreV1(), ns: "default"}, cs, &gets
}

// ownedPod is a pod as the engine makes it for container name.
func ownedPod(name string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: "u1",
		Labels: map[string]string{labelManagedBy: managedByValue, labelContainer: name}}}
}

// waitGoneRun starts waitPodGone on pod box of c, lets it wait 6 polls, returns how
// many reads it made meanwhile, deletes the pod and checks that the wait ends.
func waitGoneRun(t *testing.T, c *Client, cs *fake.Clientset, gets *atomic.Int64) (readsBefore int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.waitPodGone(ctx, "box", "u1") }()
	time.Sleep(6 * pollEvery)
	readsBefore = gets.Load()
	if err := cs.CoreV1().Pods("default").Delete(ctx, "box", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the wait did not end after the pod was deleted")
	}
	return readsBefore
}

// TestWaitPodGoneWatches: waiting for a pod to go reads it once, then waits on a
// watch rather than reading it every pollEvery, and ends once it is deleted.
func TestWaitPodGoneWatches(t *testing.T) {
	c, cs, gets := fakeClient(t, ownedPod("box"))
	if n := waitGoneRun(t, c, cs, gets); n > 2 {
		t.Errorf("%d reads of the pod in %v: polled every %v instead of watching", n, 6*pollEvery, pollEvery)
	}
}

// TestWaitPodGoneWithoutWatch: an account that may not watch pods still sees the pod
// go, by reading it every pollEvery.
func TestWaitPodGoneWithoutWatch(t *testing.T) {
	c, cs, gets := fakeClient(t, ownedPod("box"))
	cs.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watchIface, error) {
		return true, nil, errForbiddenWatch
	})
	if n := waitGoneRun(t, c, cs, gets); n < 3 {
		t.Errorf("%d reads of the pod without a watch: want a read every %v", n, pollEvery)
	}
}

type watchIface = watch.Interface

var errForbiddenWatch = apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("may not watch"))
