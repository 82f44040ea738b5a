package testengine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/util/exec"
)

func TestKubeSkipsUnconfigured(t *testing.T) {
	t.Setenv(KubeconfigEnv, "")
	skipped := false
	t.Run("unset", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		Kube(t)
		t.Error("Kube returned without a cluster configured")
	})
	if !skipped {
		t.Fatal("Kube did not skip without " + KubeconfigEnv)
	}
}

// saClient is a clientset and its configuration from a kubeconfig KubeNamespace wrote.
func saClient(t *testing.T, kubeconfig string) (*kubernetes.Clientset, *rest.Config) {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("reading %s: %v", kubeconfig, err)
	}
	rc.Timeout = 30 * time.Second
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return cs, rc
}

// capped keeps the first max bytes written to it and counts the rest: what a pod
// prints is not trusted to be small.
type capped struct {
	buf     bytes.Buffer
	max     int
	dropped int
}

func (c *capped) Write(p []byte) (int, error) {
	n := len(p)
	room := c.max - c.buf.Len()
	if room < len(p) {
		c.dropped += len(p) - max(room, 0)
		p = p[:max(room, 0)]
	}
	c.buf.Write(p)
	return n, nil
}

func podExec(ctx context.Context, cs *kubernetes.Clientset, rc *rest.Config, ns, pod string, cmd ...string) (string, error) {
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewWebSocketExecutor(rc, "GET", req.URL().String())
	if err != nil {
		return "", err
	}
	out := &capped{max: 4096}
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: out, Stderr: out})
	if out.dropped > 0 {
		return out.buf.String(), fmt.Errorf("%v: output over %d bytes (%d more)", cmd, out.max, out.dropped)
	}
	return out.buf.String(), err
}

var idLine = regexp.MustCompile(`^uid=(\d{1,10})\(([a-z_][a-z0-9_-]{0,31})\) gid=(\d{1,10})\(([a-z_][a-z0-9_-]{0,31})\)( groups=[0-9a-z_(),-]{1,512})?\n$`)

// TestKubeCluster proves the test cluster works the way the engine uses it: a pod from
// the test image, as a service account with rights only in its own namespace, Running;
// commands through the API server's pods/exec, exit status included; then deleted.
func TestKubeCluster(t *testing.T) {
	_, image := Kube(t)
	ns, kubeconfig := KubeNamespace(t, AllRights)
	cs, rc := saClient(t, kubeconfig)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	grace, no := int64(0), false
	start := time.Now()
	_, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "probe"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "sandbox", Image: image, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sleep", "3600"},
			}},
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  &no,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod: %v", err)
	}
	testenv.WaitFor(t, time.Minute, "pod probe Running", func() bool {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, "probe", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("reading pod: %v", err)
		}
		for _, s := range p.Status.ContainerStatuses {
			if w := s.State.Waiting; w != nil && (w.Reason == "ErrImageNeverPull" || w.Reason == "CreateContainerError") {
				t.Fatalf("pod cannot start: %s: %s (is %s imported? scripts/k8s-cluster.sh up %s)", w.Reason, w.Message, image, Image())
			}
		}
		return p.Status.Phase == corev1.PodRunning
	})
	t.Logf("pod Running %v after create", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	out, err := podExec(ctx, cs, rc, ns, "probe", "id")
	if err != nil {
		t.Fatalf("exec id: %v (output %q)", err, out)
	}
	if !idLine.MatchString(out) {
		t.Fatalf("exec id printed %q, not one id line", out)
	}
	t.Logf("exec id in %v: %q", time.Since(start).Round(time.Millisecond), out)

	out, err = podExec(ctx, cs, rc, ns, "probe", "sh", "-c", "echo to-stderr >&2; exit 7")
	var ee exec.CodeExitError
	if !errors.As(err, &ee) || ee.Code != 7 {
		t.Fatalf("exec exit 7: err %v (%T), want exit code 7", err, err)
	}
	if out != "to-stderr\n" {
		t.Fatalf("exec stderr: %q", out)
	}

	if err := cs.CoreV1().Pods(ns).Delete(ctx, "probe", metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatalf("deleting pod: %v", err)
	}
	testenv.WaitFor(t, time.Minute, "pod probe gone", func() bool {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, "probe", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// TestKubeServiceAccountRights checks that the kubeconfigs KubeNamespace writes hold
// exactly the rights asked for: none, or reading config maps only.
func TestKubeServiceAccountRights(t *testing.T) {
	Kube(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	ns, kubeconfig := KubeNamespace(t, nil)
	cs, _ := saClient(t, kubeconfig)
	_, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("listing config maps without rights: %v, want Forbidden", err)
	}

	ns2 := ns + "-ro"
	_, err = KubeClient(t).CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns2}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = KubeClient(t).CoreV1().Namespaces().Delete(context.Background(), ns2, metav1.DeleteOptions{})
	})
	kubeconfig = KubeServiceAccount(t, ns2, []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list"}}})
	cs, _ = saClient(t, kubeconfig)
	if _, err := cs.CoreV1().ConfigMaps(ns2).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("listing config maps with the right to: %v", err)
	}
	_, err = cs.CoreV1().Pods(ns2).List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("listing pods with rights on config maps only: %v, want Forbidden", err)
	}
	_, err = cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("listing config maps in another namespace: %v, want Forbidden", err)
	}
}

// TestKubeClaimBinds checks the cluster's default storage class: a claim naming no
// class binds to a host-path volume.
func TestKubeClaimBinds(t *testing.T) {
	Kube(t)
	ns, _ := KubeNamespace(t, nil)
	cs := KubeClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating claim: %v", err)
	}
	var pvc *corev1.PersistentVolumeClaim
	testenv.WaitFor(t, 30*time.Second, "claim data Bound", func() bool {
		pvc, err = cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data", metav1.GetOptions{})
		return err == nil && pvc.Status.Phase == corev1.ClaimBound
	})
	if sc := pvc.Spec.StorageClassName; sc == nil || *sc != "standard" {
		t.Fatalf("claim's storage class %v, want the default standard", sc)
	}
	pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pv.Spec.HostPath == nil || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		t.Fatalf("volume %s: hostPath %v, reclaim %s; want a host path, Delete", pv.Name, pv.Spec.HostPath, pv.Spec.PersistentVolumeReclaimPolicy)
	}
	if err := cs.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "volume "+pv.Name+" deleted with its claim", func() bool {
		_, err := cs.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}
