package kube

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestCommandsNotRateLimited: every command reads its pod first, so a client must
// send the API server far more than client-go's default 5 requests a second: 60
// reads of a running pod, one after the other, against an API server that answers at
// once take well under a second (at 5 a second, after a burst of 10, they take 10 s).
func TestCommandsNotRateLimited(t *testing.T) {
	const name, ns = "box", "limits"
	pod := v1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: OwnerLabels(name)},
		Status: v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{
			{Name: execContainer, State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}},
		}},
	}
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != fmt.Sprintf("/api/v1/namespaces/%s/pods/%s", ns, name) {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(pod)
	}))
	defer api.Close()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	err := os.WriteFile(kc, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, api.URL)), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Name: "limits", Kubeconfig: kc, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	for i := range 60 {
		if err := c.ContainerRunning(t.Context(), name); err != nil {
			t.Fatalf("read %d: %v", i+1, err)
		}
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("60 reads of a pod took %v: the client holds its requests back", took)
	}
}
