package kube

import (
	"context"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// watchPoll is how often a wait reads its pod while a watch on it is live: the watch
// wakes it at each change, so the read only covers an event the stream missed.
const watchPoll = 2 * time.Second

// podWatch wakes a wait on one pod at each change the API server reports, so the wait
// reads the pod again at once instead of at its next poll. Without a watch (an account
// that may not watch pods, a stream that ended) the wait polls every pollEvery, as it
// would without one.
type podWatch struct {
	wake chan struct{}
	live atomic.Bool
	stop context.CancelFunc
}

// watchPod starts watching pod name until the returned watch's stop is called.
func (c *Client) watchPod(ctx context.Context, name string) *podWatch {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w := &podWatch{wake: make(chan struct{}, 1), stop: cancel}
	wi, err := c.core.Pods(c.ns).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		return w
	}
	w.live.Store(true)
	go func() {
		defer wi.Stop()
		defer w.live.Store(false)
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-wi.ResultChan():
				if !ok {
					return
				}
				select {
				case w.wake <- struct{}{}:
				default:
				}
			}
		}
	}()
	return w
}

// sleep waits until the pod changes, or d passes (at least watchPoll while the watch
// is live); false when ctx ended first. A change seen since the last sleep ends the
// next one at once.
func (w *podWatch) sleep(ctx context.Context, d time.Duration) bool {
	if w.live.Load() {
		d = max(d, watchPoll)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-w.wake:
		return true
	case <-t.C:
		return true
	}
}
