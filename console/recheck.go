package console

import (
	"sync"
	"time"
)

// recheck paces reads of storage per key: a key is due when it was not read within
// every. At most max keys are remembered; past that all are forgotten (each is then
// read once more).
type recheck struct {
	every time.Duration
	max   int

	mu sync.Mutex
	at map[string]time.Time
}

// due reports whether key is to be read from storage at now, and notes it.
func (r *recheck) due(key string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if at, ok := r.at[key]; ok && now.Sub(at) < r.every {
		return false
	}
	if r.at == nil || len(r.at) >= r.max {
		r.at = make(map[string]time.Time)
	}
	r.at[key] = now
	return true
}
