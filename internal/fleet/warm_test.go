package fleet

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestWarmConfig: a warm sandbox is nobody's, named apart from every person's.
func TestWarmConfig(t *testing.T) {
	base := testBase("sb")
	w := WarmConfig(base, "0a1b")
	if w.Container != "sb_warm_0a1b" || w.Volume != "sb-data_warm_0a1b" || w.Person != "" || !w.Warm {
		t.Fatalf("WarmConfig = %+v", w)
	}
	if !isWarmName(base.Volume, w.Volume) || isWarmName(base.Volume, base.Volume+"-alice") || isWarmName(base.Volume, base.Volume+warmInfix) {
		t.Error("isWarmName tells a warm volume wrong")
	}
	p, err := PersonConfig(base, Person{Name: "warm_0a1b"})
	if err == nil && p.Container == w.Container {
		t.Errorf("a person's container %s is a warm one's", p.Container)
	}
}

// TestWarmDiffers: a person takes a warm sandbox only with the site's settings; what
// differs is named for the log.
func TestWarmDiffers(t *testing.T) {
	base := testBase("sb")
	pool := NewWarmPool(WarmOptions{Base: base, N: 1})
	for _, tc := range []struct {
		p    Person
		want string
	}{
		{Person{Name: "alice"}, ""},
		{Person{Name: "bob", Memory: "1g"}, "memory"},
		{Person{Name: "carol", Runtime: "runsc", CPUs: 1}, "cpus, runtime"},
	} {
		cfg, err := PersonConfig(base, tc.p)
		if err != nil {
			t.Fatal(err)
		}
		if got := pool.Differs(cfg); got != tc.want {
			t.Errorf("%s: Differs = %q, want %q", tc.p.Name, got, tc.want)
		}
	}
	other := base
	other.Image = "another:latest"
	other.ExecTimeout *= 2
	cfg, _ := PersonConfig(other, Person{Name: "dave"})
	if got := pool.Differs(cfg); got != "image, other sandbox settings" {
		t.Errorf("Differs = %q", got)
	}
	if pool.take() != nil || pool.Count() != 0 {
		t.Error("an empty pool handed one out")
	}
	if err := pool.Destruct(); err != nil {
		t.Errorf("Destruct of a pool never started: %v", err)
	}
}

// TestWarmWaitsForQuiet: a warm sandbox is made once people's commands no longer
// queue for the host's processors, after warmYield at the latest, and Destruct ends
// the wait.
func TestWarmWaitsForQuiet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var busy atomic.Bool
		busy.Store(true)
		p := NewWarmPool(WarmOptions{Base: testBase("sb"), N: 1})
		p.queued = busy.Load
		waited := func() time.Duration {
			start := time.Now()
			p.waitQuiet()
			return time.Since(start)
		}
		time.AfterFunc(3*time.Second, func() { busy.Store(false) })
		if d := waited(); d < 3*time.Second || d > 3*time.Second+warmQuietPoll {
			t.Errorf("with commands queued for 3s it waited %v", d)
		}
		if d := waited(); d != 0 {
			t.Errorf("with no command queued it waited %v", d)
		}
		busy.Store(true)
		if d := waited(); d < warmYield || d > warmYield+warmQuietPoll {
			t.Errorf("with commands queued for good it waited %v, want about %v", d, warmYield)
		}
		time.AfterFunc(time.Second, p.cancel)
		if d := waited(); d != time.Second {
			t.Errorf("ended by Destruct after 1s, it waited %v", d)
		}
	})
}
