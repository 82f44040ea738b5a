package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
)

// metricsMax bounds the metrics API's answer about one pod.
const metricsMax = 64 << 10

// podMetrics is what metrics.k8s.io/v1beta1 says of one pod (the fields used).
type podMetrics struct {
	Timestamp  time.Time `json:"timestamp"`
	Containers []struct {
		Name  string `json:"name"`
		Usage struct {
			CPU    string `json:"cpu"`
			Memory string `json:"memory"`
		} `json:"usage"`
	} `json:"containers"`
}

// BoxUsage is what the metrics API says the pod of container name uses: its CPU
// rate over the metrics API's own window (sample is not used), and its memory. A
// cluster without the metrics API gives a not-implemented error that says so.
func (c *Client) BoxUsage(ctx context.Context, name string, sample time.Duration) (boxapi.Usage, error) {
	cm, r, err := c.lookup(ctx, name)
	if err != nil {
		return boxapi.Usage{}, err
	}
	p, err := c.pod(ctx, cm.Name)
	if err != nil {
		return boxapi.Usage{}, err
	}
	if !podReady(p) {
		return boxapi.Usage{}, fmt.Errorf("kubernetes engine %s: stats of container %s: it is not running: %w", c.cfg.Name, cm.Name, cerrdefs.ErrConflict)
	}
	raw, err := c.core.RESTClient().Get().
		AbsPath("/apis/metrics.k8s.io/v1beta1/namespaces", c.ns, "pods", cm.Name).Do(ctx).Raw()
	if apierrors.IsNotFound(err) || apierrors.IsServiceUnavailable(err) {
		return boxapi.Usage{}, fmt.Errorf("kubernetes engine %s: stats of container %s: the cluster's metrics API (metrics.k8s.io, served by metrics-server) has no figures for the pod; install metrics-server for CPU and memory use: %w",
			c.cfg.Name, cm.Name, cerrdefs.ErrNotImplemented)
	}
	if err != nil {
		return boxapi.Usage{}, c.apiErr(err, "get", "pods.metrics.k8s.io", "reading the metrics of container "+cm.Name)
	}
	u, err := usageFromMetrics(raw, r.Memory)
	if err != nil {
		return boxapi.Usage{}, fmt.Errorf("kubernetes engine %s: stats of container %s: %w", c.cfg.Name, cm.Name, err)
	}
	return u, nil
}

// usageFromMetrics reads the metrics API's answer strictly: the CPU rate and memory in
// use of the pod's sandbox container.
func usageFromMetrics(raw []byte, memLimit int64) (boxapi.Usage, error) {
	if len(raw) > metricsMax {
		return boxapi.Usage{}, fmt.Errorf("the metrics API's answer is %d bytes, above %d", len(raw), metricsMax)
	}
	var m podMetrics
	if err := json.Unmarshal(raw, &m); err != nil {
		return boxapi.Usage{}, fmt.Errorf("reading the metrics API's answer: %w", err)
	}
	for _, ct := range m.Containers {
		if ct.Name != containerName {
			continue
		}
		cpu, err := resource.ParseQuantity(ct.Usage.CPU)
		if err != nil {
			return boxapi.Usage{}, fmt.Errorf("metrics API: cpu %q: %w", ct.Usage.CPU, err)
		}
		mem, err := resource.ParseQuantity(ct.Usage.Memory)
		if err != nil {
			return boxapi.Usage{}, fmt.Errorf("metrics API: memory %q: %w", ct.Usage.Memory, err)
		}
		nanoCores, bytesUsed := cpu.ScaledValue(resource.Nano), mem.Value()
		if nanoCores < 0 || bytesUsed < 0 {
			return boxapi.Usage{}, fmt.Errorf("metrics API: negative usage (cpu %s, memory %s)", ct.Usage.CPU, ct.Usage.Memory)
		}
		return boxapi.Usage{CPU: float64(nanoCores) / 1e9, Memory: bytesUsed, MemoryLimit: max(memLimit, 0)}, nil
	}
	return boxapi.Usage{}, fmt.Errorf("the metrics API names no container %q in the pod: %w", containerName, cerrdefs.ErrNotImplemented)
}
