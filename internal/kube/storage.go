package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// InspectImage cannot see the image: the nodes pull it when a pod starts, and a
// missing image is reported then. It answers with the reference as ID, and the
// architecture of a node of the cluster (this machine's when nodes cannot be listed).
func (c *Client) InspectImage(ctx context.Context, ref string) (boxapi.Image, error) {
	arch := runtime.GOARCH
	nodes, err := c.core.Nodes().List(ctx, metav1.ListOptions{Limit: 1})
	if err == nil && len(nodes.Items) > 0 {
		if a := nodes.Items[0].Status.NodeInfo.Architecture; dnsLabel.MatchString(a) {
			arch = a
		}
	} else if err != nil && unreachable(err) {
		return boxapi.Image{}, c.apiErr(err, "list", "nodes", "inspecting image "+ref)
	}
	return boxapi.Image{ID: ref, Architecture: arch}, nil
}

// volumeMeta is the metadata of the claim of volume name with Docker labels.
func volumeMeta(name string, labels map[string]string) metav1.ObjectMeta {
	return ownedMeta(name, labelVolumeName, name, labels)
}

// dockerLabels are the Docker labels an object of ours carries: its labels without
// ours, and those kept in the annotation.
func dockerLabels(m metav1.ObjectMeta) map[string]string {
	out := maps.Clone(m.Labels)
	if out == nil {
		out = map[string]string{}
	}
	for _, k := range []string{labelManagedBy, labelVolumeName, labelContainer, labelPod} {
		delete(out, k)
	}
	if a := m.Annotations[annotationLabels]; a != "" && len(a) <= recordMax {
		var other map[string]string
		if json.Unmarshal([]byte(a), &other) == nil {
			for k, v := range other {
				out[k] = v
			}
		}
	}
	return out
}

// volumeOf is a claim as a volume.
func volumeOf(pvc *v1.PersistentVolumeClaim) boxapi.Volume {
	return boxapi.Volume{Name: pvc.Name, Labels: dockerLabels(pvc.ObjectMeta), Created: pvc.CreationTimestamp.UTC()}
}

// CreateVolume makes the claim name; an existing one of this engine is left as it is,
// as Docker's volume create does.
func (c *Client) CreateVolume(ctx context.Context, name string, labels map[string]string) error {
	if why := validName("volume", name); why != "" {
		return fmt.Errorf("kubernetes engine %s: %s: %w", c.cfg.Name, why, cerrdefs.ErrInvalidArgument)
	}
	if pvc, err := c.core.PersistentVolumeClaims(c.ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
		if err := c.ownClaim(pvc); err != nil {
			return err
		}
		return nil
	} else if !apierrors.IsNotFound(err) {
		return c.apiErr(err, "get", "persistentvolumeclaims", "creating volume "+name)
	}
	size := c.cfg.VolumeSize
	if size <= 0 {
		size = DefaultVolumeSize
	}
	pvc := &v1.PersistentVolumeClaim{
		ObjectMeta: volumeMeta(name, labels),
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{
				v1.ResourceStorage: *resource.NewQuantity(size, resource.BinarySI),
			}},
		},
	}
	if sc := c.cfg.StorageClass; sc != "" {
		pvc.Spec.StorageClassName = &sc
	}
	got, err := c.core.PersistentVolumeClaims(c.ns).Create(ctx, pvc, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		got, err = c.core.PersistentVolumeClaims(c.ns).Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return c.apiErr(err, "create", "persistentvolumeclaims", "creating volume "+name)
	}
	if err := c.ownClaim(got); err != nil {
		return err
	}
	return nil
}

// ownClaim fails with a conflict when pvc is not a claim this engine made for the
// volume of its name: another workload's claim in the namespace is never mounted
// into a sandbox, nor removed.
func (c *Client) ownClaim(pvc *v1.PersistentVolumeClaim) error {
	if pvc.Labels[labelManagedBy] == managedByValue && pvc.Labels[labelVolumeName] == pvc.Name {
		return nil
	}
	return fmt.Errorf("kubernetes engine %s: persistent volume claim %s in namespace %s was not made by this engine (it lacks the labels %s=%s and %s=%s), so it is not used as a volume: delete or rename that claim, or give the engine a namespace of its own: %w",
		c.cfg.Name, pvc.Name, c.ns, labelManagedBy, managedByValue, labelVolumeName, pvc.Name, cerrdefs.ErrConflict)
}

// InspectVolume tells of the claim volumeID.
func (c *Client) InspectVolume(ctx context.Context, volumeID string) (boxapi.Volume, error) {
	pvc, err := c.core.PersistentVolumeClaims(c.ns).Get(ctx, volumeID, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return boxapi.Volume{}, notFound("volume", volumeID)
	}
	if err != nil {
		return boxapi.Volume{}, c.apiErr(err, "get", "persistentvolumeclaims", "inspecting volume "+volumeID)
	}
	if err := c.ownClaim(pvc); err != nil {
		return boxapi.Volume{}, err
	}
	return volumeOf(pvc), nil
}

// RemoveVolume deletes the claim. A claim a container (running or not) mounts is in
// use, as on Docker: that is a conflict unless force, which deletes it anyway (the
// cluster keeps it until no pod uses it).
func (c *Client) RemoveVolume(ctx context.Context, volumeID string, force bool) error {
	pvc, err := c.core.PersistentVolumeClaims(c.ns).Get(ctx, volumeID, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return notFound("volume", volumeID)
	}
	if err != nil {
		return c.apiErr(err, "get", "persistentvolumeclaims", "removing volume "+volumeID)
	}
	if err := c.ownClaim(pvc); err != nil {
		return err
	}
	if !force {
		users, err := c.volumeUsers(ctx, volumeID)
		if err != nil {
			return err
		}
		if len(users) > 0 {
			return fmt.Errorf("kubernetes engine %s: volume %s is in use by %s; remove those containers first: %w",
				c.cfg.Name, volumeID, strings.Join(users, ", "), cerrdefs.ErrConflict)
		}
	}
	uid := pvc.UID
	err = c.core.PersistentVolumeClaims(c.ns).Delete(ctx, volumeID, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return c.apiErr(err, "delete", "persistentvolumeclaims", "removing volume "+volumeID)
	}
	if force {
		return nil
	}
	// Unused, it goes at once: wait, so that a volume of the same name made next is a
	// new one.
	wctx, cancel := context.WithTimeout(ctx, goneWait)
	defer cancel()
	for {
		got, err := c.core.PersistentVolumeClaims(c.ns).Get(wctx, volumeID, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && got.UID != uid {
			return nil
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("kubernetes engine %s: volume %s is still being deleted; try again: %w", c.cfg.Name, volumeID, wctx.Err())
		case <-time.After(pollEvery):
		}
	}
}

// volumeUsers names the containers (records) and pods that mount claim name.
func (c *Client) volumeUsers(ctx context.Context, name string) ([]string, error) {
	var users []string
	cms, err := c.core.ConfigMaps(c.ns).List(ctx, metav1.ListOptions{LabelSelector: labelManagedBy + "=" + managedByValue})
	if err != nil {
		return nil, c.apiErr(err, "list", "configmaps", "checking who uses volume "+name)
	}
	for i := range cms.Items {
		if r, err := readRecord(&cms.Items[i]); err == nil && slices.ContainsFunc(r.Mounts, func(m volumeMount) bool { return m.Volume == name }) {
			users = append(users, "container "+cms.Items[i].Name)
		}
	}
	pods, err := c.core.Pods(c.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, c.apiErr(err, "list", "pods", "checking who uses volume "+name)
	}
	for _, p := range pods.Items {
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == name && !slices.Contains(users, "container "+p.Name) {
				users = append(users, "pod "+p.Name)
			}
		}
	}
	return users, nil
}
