package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
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

func (c *Client) ContainerStatsOneShot(ctx context.Context, name string) (container.StatsResponseReader, error) {
	cm, r, err := c.lookup(ctx, name)
	if err != nil {
		return container.StatsResponseReader{}, err
	}
	p, err := c.pod(ctx, cm.Name)
	if err != nil {
		return container.StatsResponseReader{}, err
	}
	if !podReady(p) {
		return container.StatsResponseReader{}, fmt.Errorf("kubernetes engine %s: stats of container %s: it is not running: %w", c.cfg.Name, cm.Name, cerrdefs.ErrConflict)
	}
	raw, err := c.core.RESTClient().Get().
		AbsPath("/apis/metrics.k8s.io/v1beta1/namespaces", c.ns, "pods", cm.Name).Do(ctx).Raw()
	if apierrors.IsNotFound(err) || apierrors.IsServiceUnavailable(err) {
		return container.StatsResponseReader{}, fmt.Errorf("kubernetes engine %s: stats of container %s: the cluster's metrics API (metrics.k8s.io, served by metrics-server) has no figures for the pod; install metrics-server for CPU and memory use: %w",
			c.cfg.Name, cm.Name, cerrdefs.ErrNotImplemented)
	}
	if err != nil {
		return container.StatsResponseReader{}, c.apiErr(err, "get", "pods.metrics.k8s.io", "reading the metrics of container "+cm.Name)
	}
	started := time.Time{}
	if cs := sandboxStatus(p); cs != nil && cs.State.Running != nil {
		started = cs.State.Running.StartedAt.Time
	}
	st, err := statsFromMetrics(raw, r.Memory, started, time.Now())
	if err != nil {
		return container.StatsResponseReader{}, fmt.Errorf("kubernetes engine %s: stats of container %s: %w", c.cfg.Name, cm.Name, err)
	}
	body, _ := json.Marshal(st)
	return container.StatsResponseReader{Body: io.NopCloser(bytes.NewReader(body)), OSType: "linux"}, nil
}

// statsFromMetrics converts the metrics API's answer into Docker's stats. The metrics
// API gives a CPU rate, Docker a cumulative time: the cumulative time is the rate
// times the time since the container started, so two samples a moment apart give the
// rate back.
func statsFromMetrics(raw []byte, memLimit int64, started, now time.Time) (container.StatsResponse, error) {
	var st container.StatsResponse
	if len(raw) > metricsMax {
		return st, fmt.Errorf("the metrics API's answer is %d bytes, above %d", len(raw), metricsMax)
	}
	var m podMetrics
	if err := json.Unmarshal(raw, &m); err != nil {
		return st, fmt.Errorf("reading the metrics API's answer: %w", err)
	}
	for _, ct := range m.Containers {
		if ct.Name != containerName {
			continue
		}
		cpu, err := resource.ParseQuantity(ct.Usage.CPU)
		if err != nil {
			return st, fmt.Errorf("metrics API: cpu %q: %w", ct.Usage.CPU, err)
		}
		mem, err := resource.ParseQuantity(ct.Usage.Memory)
		if err != nil {
			return st, fmt.Errorf("metrics API: memory %q: %w", ct.Usage.Memory, err)
		}
		nanoCores := cpu.ScaledValue(resource.Nano)
		bytesUsed := mem.Value()
		if nanoCores < 0 || bytesUsed < 0 {
			return st, fmt.Errorf("metrics API: negative usage (cpu %s, memory %s)", ct.Usage.CPU, ct.Usage.Memory)
		}
		up := now.Sub(started)
		if started.IsZero() || up < 0 {
			up = 0
		}
		st.Read = now
		st.CPUStats.CPUUsage.TotalUsage = uint64(float64(nanoCores) * up.Seconds())
		st.MemoryStats.Usage = uint64(bytesUsed)
		if memLimit > 0 {
			st.MemoryStats.Limit = uint64(memLimit)
		}
		return st, nil
	}
	return st, fmt.Errorf("the metrics API names no container %q in the pod: %w", containerName, cerrdefs.ErrNotImplemented)
}
