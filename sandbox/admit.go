package sandbox

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// Commands started together on one host share its processors. Fifty `true`s started
// at once, one in each of fifty sandboxes, each take about 8 ms of processor time
// (starting bash is most of it), and the kernel shares the processors fairly among
// their containers: all of them end near the end, after 50 × 8 ms / 2 processors,
// and the median call takes as long as the slowest. Admitted a few at a time in the
// order they came, the first end within milliseconds, half of them by the middle, and
// fewer at once thrash the processors' caches less.
//
// So the commands that this process starts on one engine are admitted first come,
// first served, admitPerCPU per processor of the engine's host at once. Each holds its
// place until its call is answered or for admitHold, whichever comes first: a command
// that runs long (a build, a server, one waiting for input or the network) holds a
// place only while it starts, and costs the others at most admitHold. An engine that
// does not say its processors (a cluster, whose pods run on many nodes) admits every
// command at once.

// admitPerCPU is how many commands are admitted at once per processor of the host.
const admitPerCPU = 2

// admitHold is the longest a command holds its place.
var admitHold = 50 * time.Millisecond

// admissions holds each engine's queue, by its address (engineKey → *admission).
var admissions sync.Map

// queueOf is the queue of the engine at key, a host of cpus processors. A host whose
// count changed gets a new queue; commands holding places in the old one give them
// back there.
func queueOf(key string, cpus int) *admission {
	v, ok := admissions.Load(key)
	if a, _ := v.(*admission); ok && a.cpus == cpus {
		return a
	}
	n := &admission{cpus: cpus, sem: semaphore.NewWeighted(int64(admitPerCPU * cpus))}
	if !ok {
		v, _ = admissions.LoadOrStore(key, n)
		return v.(*admission)
	}
	if admissions.CompareAndSwap(key, v, n) {
		return n
	}
	return queueOf(key, cpus)
}

// admission is the queue of one engine's commands.
type admission struct {
	cpus int
	sem  *semaphore.Weighted // first come, first served
}

// Admission counts, for the metrics: commands waiting for a place now, those that
// have waited, and the time they waited in all.
var (
	admitWaiting  atomic.Int64
	admitWaited   atomic.Int64
	admitWaitedNS atomic.Int64
)

// AdmissionStats tells how commands have queued for their host's processors (see
// admit): waiting now, how many waited since the process started, and for how long in
// all.
func AdmissionStats() (waiting, waited int64, waitedFor time.Duration) {
	return admitWaiting.Load(), admitWaited.Load(), time.Duration(admitWaitedNS.Load())
}

// admit waits for a place for a command on cli's engine and returns the function that
// gives it back (idempotent; it is given back by itself after admitHold). An engine
// whose processors are not known admits at once, as does a client that tells no
// address. The error is ctx's, when it ends first.
func admit(ctx context.Context, cli API) (release func(), err error) {
	none := func() {}
	key, ok := engineKey(cli)
	if !ok {
		return none, nil
	}
	info, err := engineInfoLast(ctx, cli)
	if err != nil || info.CPUs <= 0 {
		return none, nil //nolint:nilerr // no processor count: no queue; the command's own call says what failed
	}
	a := queueOf(key, info.CPUs)
	if !a.sem.TryAcquire(1) {
		admitWaiting.Add(1)
		start := time.Now()
		err := a.sem.Acquire(ctx, 1)
		admitWaiting.Add(-1)
		admitWaited.Add(1)
		admitWaitedNS.Add(int64(time.Since(start)))
		if err != nil {
			return none, err
		}
	}
	var once sync.Once
	give := func() { once.Do(func() { a.sem.Release(1) }) }
	t := time.AfterFunc(admitHold, give)
	return func() { t.Stop(); give() }, nil
}
