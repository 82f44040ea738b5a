package kube

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"

	cerrdefs "github.com/containerd/errdefs"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// wrap turns an API server error into one the sandbox package understands: not
// found as cerrdefs.ErrNotFound, a refused connection as the engine being down, a
// forbidden call naming the namespace and the verb the engine's account needs.
func (c *Client) wrap(err error, doing string) error {
	return c.apiErr(err, "", "", doing)
}

// apiErr is wrap for a call whose verb and resource are known ("create", "pods"): a
// forbidden call then names them exactly.
func (c *Client) apiErr(err error, verb, resource, doing string) error {
	if err == nil {
		return nil
	}
	prefix := fmt.Sprintf("kubernetes engine %s: %s", c.cfg.Name, doing)
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w", prefix, err)
	case apierrors.IsNotFound(err) && missingNamespace(err):
		return &kubeError{msg: fmt.Sprintf("%s: namespace %s does not exist; create it (kubectl create namespace %s) or set the engine's namespace to an existing one: %v", prefix, c.ns, c.ns, err),
			kind: cerrdefs.ErrFailedPrecondition, err: err}
	case apierrors.IsNotFound(err):
		return &kubeError{msg: fmt.Sprintf("%s: %v", prefix, err), kind: cerrdefs.ErrNotFound, err: err}
	case apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err):
		return &kubeError{msg: fmt.Sprintf("%s: %v", prefix, err), kind: cerrdefs.ErrConflict, err: err}
	case apierrors.IsForbidden(err):
		what := "the verb and resource the API server names"
		if verb != "" && resource != "" {
			what = fmt.Sprintf("verb %q on resource %q", verb, resource)
		}
		return &kubeError{msg: fmt.Sprintf("%s: the engine's account may not do this in namespace %s: an RBAC Role in namespace %s must grant %s, bound to the engine's account (the API server said: %v)",
			prefix, c.ns, c.ns, what, err), kind: cerrdefs.ErrPermissionDenied, err: err}
	case apierrors.IsUnauthorized(err):
		return &kubeError{msg: fmt.Sprintf("%s: the API server does not accept the engine's credentials; check the kubeconfig's user (an expired token or certificate?): %v", prefix, err),
			kind: cerrdefs.ErrUnauthenticated, err: err}
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		return &kubeError{msg: fmt.Sprintf("%s: %v", prefix, err), kind: cerrdefs.ErrInvalidArgument, err: err}
	case unreachable(err):
		return &kubeError{msg: fmt.Sprintf("%s: the API server %s did not answer (connection refused, reset or timed out); check that the cluster is up and the kubeconfig's server address: %v", prefix, hostOf(c.rest.Host), err),
			kind: errEngineDown, err: err}
	}
	return fmt.Errorf("%s: %w", prefix, err)
}

// kubeError is an API server error with the errdefs class the sandbox package tests
// for (kind) and the original chain (err).
type kubeError struct {
	msg  string
	kind error
	err  error
}

func (e *kubeError) Error() string   { return e.msg }
func (e *kubeError) Unwrap() []error { return []error{e.kind, e.err} }

// errEngineDown marks an API server that did not answer. It is, for errors.Is, both
// cerrdefs.ErrUnavailable and a refused connection (syscall.ECONNREFUSED), which is
// what the sandbox package's EngineDown looks for: trying again later may work.
var errEngineDown error = engineDown{}

type engineDown struct{}

func (engineDown) Error() string { return "the engine did not answer" }
func (engineDown) Is(target error) bool {
	return target == syscall.ECONNREFUSED || target == cerrdefs.ErrUnavailable
}

// unreachable reports whether err is a connection to the API server that failed or
// broke: refused, reset, unreachable, a timeout of the network, a name not resolved.
func unreachable(err error) bool {
	for _, e := range []error{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ETIMEDOUT} {
		if errors.Is(err, e) {
			return true
		}
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// missingNamespace reports whether a not-found error is about the namespace itself
// (a create in a namespace that does not exist).
func missingNamespace(err error) bool {
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		return false
	}
	d := se.Status().Details
	return d != nil && d.Kind == "namespaces"
}

// notFound is the error of a container or volume that does not exist.
func notFound(what, name string) error {
	return fmt.Errorf("no such %s: %s: %w", what, name, cerrdefs.ErrNotFound)
}
