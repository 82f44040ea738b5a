package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ImageBuild is refused: the cluster pulls its images from a registry, so they are
// built and pushed outside the plugin.
func (c *Client) ImageBuild(ctx context.Context, buildContext io.Reader, options build.ImageBuildOptions) (build.ImageBuildResponse, error) {
	return build.ImageBuildResponse{}, notImplemented("building an image (push the sandbox image to a registry the cluster pulls from, or import it on the nodes)")
}

// ImageInspect cannot see the image: the nodes pull it when a pod starts, and a
// missing image is reported then. It answers with the reference as ID and tag, and
// the architecture and OS of a node of the cluster (this machine's when nodes cannot
// be listed).
func (c *Client) ImageInspect(ctx context.Context, ref string, _ ...client.ImageInspectOption) (image.InspectResponse, error) {
	arch, osName := runtime.GOARCH, "linux"
	nodes, err := c.core.Nodes().List(ctx, metav1.ListOptions{Limit: 1})
	if err == nil && len(nodes.Items) > 0 {
		info := nodes.Items[0].Status.NodeInfo
		if dnsLabel.MatchString(info.Architecture) {
			arch = info.Architecture
		}
		if dnsLabel.MatchString(info.OperatingSystem) {
			osName = info.OperatingSystem
		}
	} else if err != nil && unreachable(err) {
		return image.InspectResponse{}, c.apiErr(err, "list", "nodes", "inspecting image "+ref)
	}
	return image.InspectResponse{ID: ref, RepoTags: []string{ref}, Architecture: arch, Os: osName}, nil
}

// ImageList is empty: the plugin cannot see the nodes' images.
func (c *Client) ImageList(ctx context.Context, options image.ListOptions) ([]image.Summary, error) {
	return []image.Summary{}, nil
}

func (c *Client) ImageRemove(ctx context.Context, ref string, options image.RemoveOptions) ([]image.DeleteResponse, error) {
	return nil, notImplemented("removing an image (the nodes' images are the kubelet's to collect)")
}

// NetworkCreate makes nothing: pods share the cluster's network, and a container
// without network gets a deny-all NetworkPolicy when it starts.
func (c *Client) NetworkCreate(ctx context.Context, name string, options network.CreateOptions) (network.CreateResponse, error) {
	return network.CreateResponse{ID: name}, nil
}

// NetworkInspect answers every name with an empty network: there is nothing to create.
func (c *Client) NetworkInspect(ctx context.Context, netName string, options network.InspectOptions) (network.Inspect, error) {
	return network.Inspect{Name: netName, ID: netName, Driver: "kubernetes", Scope: "local"}, nil
}

func (c *Client) NetworkRemove(ctx context.Context, netName string) error { return nil }

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

// volumeOf is Docker's view of a claim.
func volumeOf(pvc *v1.PersistentVolumeClaim) volume.Volume {
	v := volume.Volume{
		Name: pvc.Name, Driver: "kubernetes", Scope: "local", Labels: dockerLabels(pvc.ObjectMeta),
		CreatedAt: pvc.CreationTimestamp.UTC().Format(time.RFC3339), Options: map[string]string{},
		Status: map[string]any{"phase": string(pvc.Status.Phase)},
	}
	if sc := pvc.Spec.StorageClassName; sc != nil {
		v.Options["storage_class"] = *sc
	}
	if q, ok := pvc.Spec.Resources.Requests[v1.ResourceStorage]; ok {
		v.Options["size"] = q.String()
	}
	return v
}

// VolumeCreate makes the claim; an existing one is returned as it is, as Docker's
// volume create does.
func (c *Client) VolumeCreate(ctx context.Context, options volume.CreateOptions) (volume.Volume, error) {
	name := options.Name
	if why := validName("volume", name); why != "" {
		return volume.Volume{}, fmt.Errorf("kubernetes engine %s: %s: %w", c.cfg.Name, why, cerrdefs.ErrInvalidArgument)
	}
	if pvc, err := c.core.PersistentVolumeClaims(c.ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
		if err := c.ownClaim(pvc); err != nil {
			return volume.Volume{}, err
		}
		return volumeOf(pvc), nil
	} else if !apierrors.IsNotFound(err) {
		return volume.Volume{}, c.apiErr(err, "get", "persistentvolumeclaims", "creating volume "+name)
	}
	size := c.cfg.VolumeSize
	if size <= 0 {
		size = DefaultVolumeSize
	}
	pvc := &v1.PersistentVolumeClaim{
		ObjectMeta: volumeMeta(name, options.Labels),
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
		return volume.Volume{}, c.apiErr(err, "create", "persistentvolumeclaims", "creating volume "+name)
	}
	if err := c.ownClaim(got); err != nil {
		return volume.Volume{}, err
	}
	return volumeOf(got), nil
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

func (c *Client) VolumeInspect(ctx context.Context, volumeID string) (volume.Volume, error) {
	pvc, err := c.core.PersistentVolumeClaims(c.ns).Get(ctx, volumeID, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return volume.Volume{}, notFound("volume", volumeID)
	}
	if err != nil {
		return volume.Volume{}, c.apiErr(err, "get", "persistentvolumeclaims", "inspecting volume "+volumeID)
	}
	if err := c.ownClaim(pvc); err != nil {
		return volume.Volume{}, err
	}
	return volumeOf(pvc), nil
}

// VolumeList lists the claims the engine made, filtered by label and name.
func (c *Client) VolumeList(ctx context.Context, options volume.ListOptions) (volume.ListResponse, error) {
	for _, k := range options.Filters.Keys() {
		if k != "label" && k != "name" {
			return volume.ListResponse{}, fmt.Errorf("volume list filter %q is not supported on a Kubernetes engine (label, name are): %w", k, cerrdefs.ErrInvalidArgument)
		}
	}
	list, err := c.core.PersistentVolumeClaims(c.ns).List(ctx, metav1.ListOptions{LabelSelector: labelManagedBy + "=" + managedByValue})
	if err != nil {
		return volume.ListResponse{}, c.apiErr(err, "list", "persistentvolumeclaims", "listing volumes")
	}
	resp := volume.ListResponse{Volumes: []*volume.Volume{}}
	names := options.Filters.Get("name")
	for i := range list.Items {
		v := volumeOf(&list.Items[i])
		if len(names) > 0 && !slices.ContainsFunc(names, func(n string) bool { return strings.Contains(v.Name, n) }) {
			continue
		}
		if !labelsMatch(v.Labels, options.Filters.Get("label")) {
			continue
		}
		resp.Volumes = append(resp.Volumes, &v)
	}
	return resp, nil
}

// labelsMatch reports whether labels pass Docker's label filters (key or key=value).
func labelsMatch(labels map[string]string, filters []string) bool {
	for _, f := range filters {
		k, v, hasValue := strings.Cut(f, "=")
		have, ok := labels[k]
		if !ok || hasValue && have != v {
			return false
		}
	}
	return true
}

// VolumeRemove deletes the claim. A claim a container (running or not) mounts is in
// use, as on Docker: that is a conflict unless force, which deletes it anyway (the
// cluster keeps it until no pod uses it).
func (c *Client) VolumeRemove(ctx context.Context, volumeID string, force bool) error {
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
