// Commands in a pod: the pods/exec subresource, as client-go's remotecommand speaks it
// (WebSocket, SPDY when the API server refuses the upgrade), and what its errors mean.

package kube

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"
)

// execContainer is the name of the container, in each pod, that commands run in.
const execContainer = "sandbox"

// executor makes the stream of one exec in the pod: WebSocket, or SPDY when the API
// server (or a proxy on the way) refuses the WebSocket upgrade, as kubectl does.
func (c *Client) executor(pod string, pe *v1.PodExecOptions) (remotecommand.Executor, error) {
	u := c.core.RESTClient().Post().Resource("pods").Namespace(c.ns).Name(pod).SubResource("exec").
		VersionedParams(pe, scheme.ParameterCodec).URL()
	return c.executorFor(u)
}

func (c *Client) executorFor(u *url.URL) (remotecommand.Executor, error) {
	ws, err := remotecommand.NewWebSocketExecutor(c.rest, "GET", u.String())
	if err != nil {
		return nil, fmt.Errorf("kubernetes engine %s: preparing an exec (WebSocket): %w", c.cfg.Name, err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(c.rest, "POST", u)
	if err != nil {
		return nil, fmt.Errorf("kubernetes engine %s: preparing an exec (SPDY): %w", c.cfg.Name, err)
	}
	return remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

// startFailure reports whether err says the container runtime could not start the
// command (a missing program, one that may not be executed), and the runtime's words.
func startFailure(err error) (string, bool) {
	if err == nil {
		return "", false
	}
	msg := err.Error()
	if !strings.Contains(msg, "unable to start container process") && !strings.Contains(msg, "failed to exec in container") {
		return "", false
	}
	if containerNotRunning(err) {
		return "", false // the container's end, not the program's: see streamErr
	}
	if i := strings.Index(msg, "OCI runtime exec failed"); i >= 0 {
		msg = msg[i:]
	}
	return clip(msg, 4096), true
}

// streamErr explains a stream's error: an exit status stays as it is; otherwise the
// pod is looked up, and a pod that is gone or not running makes the error a not-found
// or conflict one (the container is gone); else the API server is taken to be down,
// and the error wraps ECONNRESET so that the sandbox package sees it so.
func (c *Client) streamErr(pod string, err error) error {
	var ee utilexec.ExitError
	if err == nil || errors.As(err, &ee) || errors.Is(err, context.Canceled) {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	perr := c.podRunning(ctx, pod)
	if perr == nil && containerNotRunning(err) {
		// The runtime has the container ended (killed, evicted) before the kubelet has
		// told the API server: wait for it, which says why.
		perr = c.waitNotRunning(ctx, pod, endedWait)
		if perr == nil {
			perr = fmt.Errorf("kubernetes engine %s: container %s is not running (its runtime says so; the API server does not yet): %w", c.cfg.Name, pod, cerrdefs.ErrConflict)
		}
	}
	if perr != nil && (cerrdefs.IsNotFound(perr) || cerrdefs.IsConflict(perr)) {
		return fmt.Errorf("%w (the exec's stream ended: %s)", perr, clip(err.Error(), 512))
	}
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("the API server refused the exec: %w; the engine's account needs the verbs create and get on pods/exec in namespace %s", err, c.ns)
	}
	return fmt.Errorf("the exec's stream to the API server broke (%w): %w", syscall.ECONNRESET, err)
}

// endedWait bounds how long an exec that the runtime refused because its container
// ended waits for the API server to show the pod's end (the kubelet reports it a
// moment after it stopped the container).
const endedWait = 5 * time.Second

// containerNotRunning reports whether an exec's error is the runtime's refusal of a
// container that is not running (containerd: "container is in CONTAINER_EXITED
// state", "container is not running", "no running task found"): the pod's end
// (killed, evicted), not the program's failure to start.
func containerNotRunning(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	for _, s := range []string{"container is in CONTAINER_", "container is not running", "no running task found"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// waitNotRunning waits, at most d, until podRunning fails for pod, and returns its
// error; nil when the pod still runs after d.
func (c *Client) waitNotRunning(ctx context.Context, pod string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pollEvery):
		}
		if err := c.podRunning(ctx, pod); err != nil {
			if ctx.Err() != nil {
				return nil // the bound ended the read
			}
			return err
		}
	}
}

// killedWithPod turns the exit of a command killed by a signal into the pod's own
// error when the pod is gone or going (deleted under the command): the container went
// away, as with Docker's removal of a container, not the command.
func (c *Client) killedWithPod(pod string, err error) error {
	var ee utilexec.ExitError
	if !errors.As(err, &ee) || ee.ExitStatus() < 128 {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if perr := c.podRunning(ctx, pod); cerrdefs.IsNotFound(perr) || cerrdefs.IsConflict(perr) {
		return fmt.Errorf("the command was killed (exit code %d) with its pod: %w", ee.ExitStatus(), perr)
	}
	return err
}

// ContainerRunning fails as podRunning does: a not-found error when the container's pod
// is gone (deleted, even while its node still kills it), a conflict error when it is
// stopping or does not run. The sandbox asks before sending a command to an agent whose
// exec stream may not have noticed the pod's deletion yet.
func (c *Client) ContainerRunning(ctx context.Context, name string) error {
	return c.podRunning(ctx, name)
}

// podRunning fails with a not-found error when the pod (or the container it stands for)
// is missing and a conflict error when the pod does not run.
func (c *Client) podRunning(ctx context.Context, name string) error {
	p, err := c.core.Pods(c.ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("kubernetes engine %s: no pod %s in namespace %s (the container is stopped or gone; start it): %w", c.cfg.Name, name, c.ns, cerrdefs.ErrNotFound)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("kubernetes engine %s: reading pod %s: %w; the engine's account needs the verb get on pods in namespace %s", c.cfg.Name, name, err, c.ns)
	case errors.Is(err, context.Canceled) || apierrors.IsUnauthorized(err):
		// The caller gave up, or the credentials are refused: the API server answered.
		return c.apiErr(err, "get", "pods", "reading pod "+name)
	case err != nil:
		return fmt.Errorf("kubernetes engine %s: reading pod %s (%w): %w", c.cfg.Name, name, syscall.ECONNRESET, err)
	}
	if !ownPod(p, name) {
		return c.foreignPod(name) // nothing runs in a pod of another's
	}
	if p.DeletionTimestamp == nil && (p.Status.Phase == v1.PodFailed || p.Status.Phase == v1.PodSucceeded) {
		// Ended for good (evicted, say): why is what a command that ran in it needs.
		c.evictionReason(ctx, p)
		return fmt.Errorf("kubernetes engine %s: container %s is not running: %s: %w", c.cfg.Name, name, podFailure(p), cerrdefs.ErrConflict)
	}
	if p.DeletionTimestamp != nil || p.Status.Phase != v1.PodRunning {
		return fmt.Errorf("kubernetes engine %s: container %s is not running (pod phase %s): %w", c.cfg.Name, name, p.Status.Phase, cerrdefs.ErrConflict)
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == execContainer && cs.State.Running == nil {
			return fmt.Errorf("kubernetes engine %s: container %s is not running (its container %q waits or ended): %w", c.cfg.Name, name, execContainer, cerrdefs.ErrConflict)
		}
	}
	return nil
}

// execWrapper applies WorkingDir and Env, passed as arguments: $1 the directory, $2
// the count of NAME=VALUE entries that follow, then the command.
const execWrapper = `cd -- "$1" || exit 126; shift; n=$1; shift; while [ "$n" -gt 0 ]; do export "$1" || exit 126; shift; n=$((n-1)); done; exec "$@"`

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// processArgv is the command the pod runs for cmd as user in dir with env: cmd
// itself, or cmd under execWrapper when dir or env is set.
func processArgv(user, dir string, env, cmd []string) ([]string, error) {
	switch user {
	case "", "root", "0", "0:0", "root:root":
	default:
		return nil, fmt.Errorf("running as user %q is not supported on a Kubernetes engine (commands run as the container's user, root): run as root or switch users inside the command (su, setpriv): %w", user, cerrdefs.ErrNotImplemented)
	}
	if len(cmd) == 0 {
		return nil, fmt.Errorf("no command given: %w", cerrdefs.ErrInvalidArgument)
	}
	if dir == "" && len(env) == 0 {
		return cmd, nil
	}
	for _, e := range env {
		if !envName.MatchString(e) {
			return nil, fmt.Errorf("environment entry %q is not NAME=VALUE with a shell variable's name: %w", clip(e, 64), cerrdefs.ErrInvalidArgument)
		}
	}
	if dir == "" {
		dir = "."
	}
	argv := make([]string, 0, 6+len(env)+len(cmd))
	argv = append(argv, "/bin/sh", "-c", execWrapper, "exec", dir, strconv.Itoa(len(env)))
	argv = append(argv, env...)
	return append(argv, cmd...), nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
