package kube_test

import (
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/kube"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// The Kubernetes engine answers every call the sandbox package makes.
var _ sandbox.API = (*kube.Client)(nil)
