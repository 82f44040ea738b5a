package testengine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The Kubernetes tier. make test starts the project's own single-node cluster
// (scripts/k8s-cluster.sh up) and exports these two variables to the tests; a run
// without them (go test by hand) skips the tests that need a cluster, saying so.
const (
	// KubeconfigEnv names the cluster's admin kubeconfig.
	KubeconfigEnv = "MCP_SANDBOX_KUBECONFIG"
	// KubeImageEnv names the test image as the cluster knows it.
	KubeImageEnv = "MCP_SANDBOX_KUBE_IMAGE"
	// DefaultKubeImage is the name scripts/k8s-cluster.sh gives code-sandbox-test:latest.
	DefaultKubeImage = "k8s.local/code-sandbox-test:latest"
)

// AllRights is a Role's rules that allow everything in its namespace.
var AllRights = []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}}

// Kube returns the test cluster's admin kubeconfig and the image its pods run, from
// $MCP_SANDBOX_KUBECONFIG and $MCP_SANDBOX_KUBE_IMAGE (default [DefaultKubeImage]).
// It skips the test under -short or when no cluster is configured, and fails it when
// the kubeconfig named is not there.
func Kube(tb testing.TB) (kubeconfig, image string) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("needs a Kubernetes cluster (-short)")
	}
	kubeconfig = os.Getenv(KubeconfigEnv)
	if kubeconfig == "" {
		tb.Skipf("needs a Kubernetes cluster: %s is unset (make test starts one with scripts/k8s-cluster.sh up and sets it)", KubeconfigEnv)
	}
	if _, err := os.Stat(kubeconfig); err != nil {
		tb.Fatalf("%s=%s: %v: start the cluster with scripts/k8s-cluster.sh up %s", KubeconfigEnv, kubeconfig, err, Image())
	}
	image = os.Getenv(KubeImageEnv)
	if image == "" {
		image = DefaultKubeImage
	}
	return kubeconfig, image
}

// KubeRESTConfig returns the admin configuration of the test cluster ([Kube]), after
// checking that its API server answers.
func KubeRESTConfig(tb testing.TB) *rest.Config {
	tb.Helper()
	kubeconfig, _ := Kube(tb)
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		tb.Fatalf("reading %s: %v", kubeconfig, err)
	}
	rc.Timeout = 30 * time.Second
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		tb.Fatalf("client for %s: %v", kubeconfig, err)
	}
	if _, err := cs.Discovery().ServerVersion(); err != nil {
		tb.Fatalf("the API server of %s does not answer (%v): see scripts/k8s-cluster.sh status", kubeconfig, err)
	}
	return rc
}

// KubeClient returns a clientset with the test cluster's admin rights, for what tests
// arrange and check behind the engine's back (deleting pods, reading claims).
func KubeClient(tb testing.TB) *kubernetes.Clientset {
	tb.Helper()
	cs, err := kubernetes.NewForConfig(KubeRESTConfig(tb))
	if err != nil {
		tb.Fatalf("Kubernetes client: %v", err)
	}
	return cs
}

var notLabel = regexp.MustCompile(`[^a-z0-9-]+`)

// KubeNamespace creates a namespace of its own for the test, deleted when the test
// ends, and returns it with a kubeconfig (in tb.TempDir) for a service account that
// holds exactly rights there ([KubeServiceAccount]); nil rights: none at all.
func KubeNamespace(tb testing.TB, rights []rbacv1.PolicyRule) (namespace, kubeconfig string) {
	tb.Helper()
	cs := KubeClient(tb)
	base := strings.Trim(notLabel.ReplaceAllString(strings.ToLower(tb.Name()), "-"), "-")
	if len(base) > 40 {
		base = strings.Trim(base[:40], "-")
	}
	name := "t-" + base + "-" + testenv.RandomHex(4)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"mcp-sandbox.test": "true"}},
	}, metav1.CreateOptions{}); err != nil {
		tb.Fatalf("creating namespace %s: %v", name, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		grace := int64(0)
		err := cs.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
		if err != nil && !apierrors.IsNotFound(err) {
			tb.Errorf("deleting namespace %s: %v", name, err)
		}
	})
	// Pods cannot be created before the namespace's default service account exists.
	testenv.WaitFor(tb, 30*time.Second, "service account default in "+name, func() bool {
		_, err := cs.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})
	return name, KubeServiceAccount(tb, name, rights)
}

// KubeServiceAccount creates the service account "tester" in namespace with a Role of
// rules bound to it (no Role when rules is empty), and returns the path of a kubeconfig
// in tb.TempDir that authenticates as it with a token from the TokenRequest API.
func KubeServiceAccount(tb testing.TB, namespace string, rules []rbacv1.PolicyRule) string {
	tb.Helper()
	rc := KubeRESTConfig(tb)
	cs := KubeClient(tb)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const sa = "tester"
	if _, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: sa},
	}, metav1.CreateOptions{}); err != nil {
		tb.Fatalf("creating service account %s/%s: %v", namespace, sa, err)
	}
	if len(rules) > 0 {
		if _, err := cs.RbacV1().Roles(namespace).Create(ctx, &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: sa}, Rules: rules,
		}, metav1.CreateOptions{}); err != nil {
			tb.Fatalf("creating role %s/%s: %v", namespace, sa, err)
		}
		if _, err := cs.RbacV1().RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: sa},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: sa},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: namespace}},
		}, metav1.CreateOptions{}); err != nil {
			tb.Fatalf("creating role binding %s/%s: %v", namespace, sa, err)
		}
	}
	expiry := int64(3600)
	tok, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{ExpirationSeconds: &expiry},
	}, metav1.CreateOptions{})
	if err != nil {
		tb.Fatalf("requesting a token for %s/%s (serviceaccounts/token create): %v", namespace, sa, err)
	}
	ca := rc.CAData
	if len(ca) == 0 {
		if ca, err = os.ReadFile(rc.CAFile); err != nil {
			tb.Fatalf("reading the cluster's CA: %v", err)
		}
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthorityData: ca}
	cfg.AuthInfos[sa] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: sa, Namespace: namespace}
	cfg.CurrentContext = "test"
	path := filepath.Join(tb.TempDir(), fmt.Sprintf("%s-%s.kubeconfig", namespace, sa))
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		tb.Fatalf("writing %s: %v", path, err)
	}
	return path
}
