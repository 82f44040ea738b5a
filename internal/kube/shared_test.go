package kube

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSharedClient: the sandboxes of one engine share its client, and so its
// connections to the API server (clients made by New open one each); an edited
// kubeconfig or another setting gets a client of its own.
func TestSharedClient(t *testing.T) {
	const ns = "shared"
	var conns atomic.Int32
	api := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := filepath.Base(r.URL.Path)
		pod := v1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: OwnerLabels(name)},
			Status: v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{
				{Name: execContainer, State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}}}}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(pod)
	}))
	api.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	api.Start()
	defer api.Close()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	write := func(user string) {
		err := os.WriteFile(kc, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {token: %s}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, api.URL, user)), 0o600)
		if err != nil {
			t.Fatal(err)
		}
	}
	write("t")
	cfg := Config{Name: "shared", Kubeconfig: kc, Namespace: ns}
	// Five sandboxes, each with the client its engine gives it, each asking twice.
	use := func(make func(Config) (*Client, error)) ([]*Client, int32) {
		conns.Store(0)
		var cs []*Client
		for range 5 {
			c, err := make(cfg)
			if err != nil {
				t.Fatal(err)
			}
			cs = append(cs, c)
		}
		for range 2 {
			for i, c := range cs {
				if err := c.ContainerRunning(t.Context(), fmt.Sprintf("box%d", i)); err != nil {
					t.Fatal(err)
				}
			}
		}
		return cs, conns.Load()
	}
	if _, n := use(New); n != 5 {
		t.Errorf("five clients from New opened %d connections, want 5 (what sharing spares)", n)
	}
	cs, n := use(Shared)
	if n != 1 {
		t.Errorf("five sandboxes of one engine opened %d connections to the API server, want 1", n)
	}
	for _, c := range cs[1:] {
		if c != cs[0] {
			t.Error("one engine, several clients")
		}
	}
	other := cfg
	other.Namespace = "elsewhere"
	if c, err := Shared(other); err != nil || c == cs[0] {
		t.Errorf("another namespace: %p %v, the same client as the first", c, err)
	}
	time.Sleep(10 * time.Millisecond) // a modification time of its own
	write("t2")
	if c, err := Shared(cfg); err != nil || c == cs[0] {
		t.Errorf("an edited kubeconfig: %p %v, the same client as before", c, err)
	}
}
