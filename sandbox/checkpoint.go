package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/agentbin"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
	"go.uber.org/zap"
)

// Checkpoints.
//
// A checkpoint is the whole sandbox: `docker commit` of the container (its filesystem
// outside boxapi.WorkDir) to an image tagged <container>-checkpoint:<id> (CheckpointImage),
// and a copy of the boxapi.WorkDir volume in a volume <container>-checkpoint-<id> of its
// own. The image is written last and is the record: its labels name the checkpoint,
// its owner, volume and size, and survive Caddy's restarts; a copy volume without its
// image is a checkpoint that failed halfway, and is removed. Checkpoints made before
// they were named after their container (checkpointRepo:<id>, checkpointRepo-<id>) are
// still found.
//
// The copies are made by the agent's copy mode (cmd/sandbox-agent), never by the
// image's cp, in a short-lived container made from the operator's configured image
// (never from the sandbox's own, which the model may have changed), with no network,
// no privileges beyond the file capabilities a copy as root needs, and both volumes
// mounted. All of a sandbox's checkpoints hold at most MaxCheckpointBytes together.
const (
	checkpointRepo = "mcp-sandbox-checkpoint"

	labelCheckpoint        = "mcp-sandbox.checkpoint"         // the id, on the image and its volume
	labelCheckpointOf      = "mcp-sandbox.checkpoint.of"      // the sandbox container it was saved from
	labelCheckpointName    = "mcp-sandbox.checkpoint.name"    // the name given, or ""
	labelCheckpointCreated = "mcp-sandbox.checkpoint.created" // RFC 3339 with nanoseconds
	labelCheckpointVolume  = "mcp-sandbox.checkpoint.volume"  // the copy of boxapi.WorkDir
	labelCheckpointBytes   = "mcp-sandbox.checkpoint.bytes"   // the image's own layer plus the copy
	labelCheckpointCopier  = "mcp-sandbox.checkpoint.copier"  // on a copying container: the sandbox container

	// DefaultMaxCheckpoints is max_checkpoints' default.
	DefaultMaxCheckpoints = 5

	// copierPids bounds a copying container's processes. It has no memory limit: the
	// copy holds little, and a limit also caps the page cache it may dirty, which throttled
	// large copies (restores of 800 MB took 4.0 s with 2 GiB, 3.1 s without, here).
	copierPids = 64
	// copierOutput bounds what is kept of a copying container's output.
	copierOutput = 4096

	// Bounds of the job records carried over a restore (see carryJobs): the jobs
	// directory holds at most 1 GB of output by the runner's own pruning, and a job
	// about five files (20,000 jobs in ten minutes are 100,000).
	carryMaxBytes   = 2 << 30
	carryMaxEntries = 200000
)

// copierTimeout bounds one copy of a /sandbox, so a sandbox holding millions of files
// cannot keep itself paused, or a checkpoint or restore waiting, without end.
var copierTimeout = 10 * time.Minute

// checkpointMaxSystem bounds the sandbox's own files outside boxapi.WorkDir (its
// writable layer) that a checkpoint saves. Docker measures and commits files at their
// apparent size: a sparse file a model makes with truncate -s 1T costs nothing in the
// sandbox and a terabyte of the engine's disk in the commit, outside the sandbox's
// limits.
var checkpointMaxSystem int64 = 64 << 30

// copierCaps are what the copy needs as root to read every file and keep owners,
// modes, times, device nodes and file capabilities; everything else is dropped.
var copierCaps = []string{"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "MKNOD", "SETFCAP"}

// saving holds the names of the containers a checkpoint has paused or a restore is
// replacing: Ensure waits for them instead of unpausing or recreating them halfway.
var saving sync.Map

// waitSaved waits while a checkpoint holds the container paused.
func (s *saveStore) waitSaved(ctx context.Context) error {
	for {
		if _, ok := saving.Load(s.cfg.Container); !ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// copiersBusy holds the names of the copying containers at work in this process, which
// the sweep of leftovers leaves alone.
var copiersBusy sync.Map

// checkpointsBusy holds the ids of checkpoints being made in this process, whose
// volume has no image yet on purpose.
var checkpointsBusy sync.Map

// newCheckpointID returns an id that sorts by time: c, the Unix time in 8 hex digits,
// 6 random hex digits.
func newCheckpointID() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("c%08x%s", uint32(time.Now().Unix()), hex.EncodeToString(b[:]))
}

// CheckpointImage is the image reference of checkpoint id of the sandbox container of:
// a repository named after the container (<container>-checkpoint), so an engine shared
// by several sites shows whose each is.
func CheckpointImage(of, id string) string { return checkpointRepoOf(of) + ":" + id }

// repoName is what Docker accepts as one component of a repository name.
var repoName = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$`)

// checkpointRepoOf is the repository of the checkpoints of container of, or
// checkpointRepo for a container name Docker would not take as one.
func checkpointRepoOf(of string) string {
	r := strings.ToLower(of) + "-checkpoint"
	if len(r) > 128 || !repoName.MatchString(r) {
		return checkpointRepo
	}
	return r
}

// checkpointRefs are the references checkpoint id's image may be tagged with: its
// own, and the one of the checkpoints made before they were named after their
// sandbox (checkpointRepo:<id>).
func checkpointRefs(of, id string) []string {
	return []string{CheckpointImage(of, id), checkpointRepo + ":" + id}
}

// tagged reports whether image im is tagged as the checkpoint its labels name.
func tagged(im image.Summary) bool {
	id := im.Labels[labelCheckpoint]
	return slices.ContainsFunc(checkpointRefs(im.Labels[labelCheckpointOf], id), func(r string) bool {
		return slices.Contains(im.RepoTags, r)
	})
}

// checkpointComment is the comment of checkpoint id's image, which tells it from an
// image committed by hand from a container that was restored from a checkpoint.
func checkpointComment(id string) string { return "mcp-sandbox checkpoint " + id }

// checkpointVolume is the name of the copy of boxapi.WorkDir of checkpoint id of the
// sandbox container of; checkpoints made before they were named after their sandbox
// have checkpointRepo-<id> (their image's label labelCheckpointVolume says which).
func checkpointVolume(of, id string) string { return of + "-checkpoint-" + id }

// isCheckpointVolume reports whether name is a name the copy of checkpoint id of
// container of may have.
func isCheckpointVolume(name, of, id string) bool {
	return name == checkpointVolume(of, id) || name == checkpointRepo+"-"+id
}

// stored is a checkpoint with its image reference and volume.
type stored struct {
	boxapi.Checkpoint
	ref, vol string
}

// listStored lists the checkpoints of every sandbox on the engine, oldest first.
func listStored(ctx context.Context, cli API) ([]stored, error) {
	// Filtered here, not by the engine (see Containers).
	list, err := dockerOf(cli).ImageList(ctx, image.ListOptions{})
	if cerrdefs.IsNotImplemented(err) {
		return nil, nil // an engine without images (Kubernetes) holds no checkpoints
	}
	if err != nil {
		return nil, fmt.Errorf("listing checkpoint images: %w", err)
	}
	var out []stored
	for _, im := range list {
		id, of := im.Labels[labelCheckpoint], im.Labels[labelCheckpointOf]
		if !boxapi.ValidCheckpointID(id) {
			continue
		}
		i := slices.IndexFunc(checkpointRefs(of, id), func(r string) bool { return slices.Contains(im.RepoTags, r) })
		if i < 0 {
			continue
		}
		vol := im.Labels[labelCheckpointVolume]
		if !isCheckpointVolume(vol, of, id) {
			vol = checkpointVolume(of, id)
		}
		out = append(out, stored{checkpointOf(im.Labels), checkpointRefs(of, id)[i], vol})
	}
	slices.SortFunc(out, func(a, b stored) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// findStored is checkpoint id, of any sandbox on the engine.
func findStored(ctx context.Context, cli API, id string) (stored, error) {
	all, err := listStored(ctx, cli)
	if err != nil {
		return stored{}, err
	}
	i := slices.IndexFunc(all, func(c stored) bool { return c.ID == id })
	if !boxapi.ValidCheckpointID(id) || i < 0 {
		return stored{}, fmt.Errorf("%w: %s", boxapi.ErrCheckpointNotFound, id)
	}
	return all[i], nil
}

// Checkpoints lists the checkpoints of every sandbox on the engine, oldest first.
func Checkpoints(ctx context.Context, cli API) ([]boxapi.Checkpoint, error) {
	all, err := listStored(ctx, cli)
	out := make([]boxapi.Checkpoint, 0, len(all))
	for _, c := range all {
		out = append(out, c.Checkpoint)
	}
	return out, err
}

// checkpointOf reads a checkpoint's labels.
func checkpointOf(l map[string]string) boxapi.Checkpoint {
	c := boxapi.Checkpoint{ID: l[labelCheckpoint], Name: l[labelCheckpointName], Person: l[labelPerson],
		Container: l[labelCheckpointOf], Engine: l[labelEngine]}
	c.SizeBytes, _ = strconv.ParseInt(l[labelCheckpointBytes], 10, 64)
	c.CreatedAt, _ = time.Parse(time.RFC3339Nano, l[labelCheckpointCreated])
	return c
}

// DeleteCheckpoint removes checkpoint id's image and its copy of boxapi.WorkDir. An image a
// sandbox or a later checkpoint is built on loses its tag and its label at once, and
// its layers when the last container or image on it goes.
func DeleteCheckpoint(ctx context.Context, cli API, id string) error {
	if !boxapi.ValidCheckpointID(id) {
		return fmt.Errorf("%w: %q", boxapi.ErrCheckpointNotFound, id)
	}
	ck, err := findStored(ctx, cli, id)
	if err != nil {
		return err
	}
	_, err = dockerOf(cli).ImageRemove(ctx, ck.ref, image.RemoveOptions{Force: true, PruneChildren: true})
	if cerrdefs.IsNotImplemented(err) {
		return fmt.Errorf("%w: %s (this engine keeps no checkpoints)", boxapi.ErrCheckpointNotFound, id)
	}
	if cerrdefs.IsNotFound(err) {
		err = fmt.Errorf("%w: %s", boxapi.ErrCheckpointNotFound, id)
	} else if err != nil {
		return fmt.Errorf("removing checkpoint image %s (try again, or docker rmi -f %s): %w", id, ck.ref, err)
	}
	if verr := cli.RemoveVolume(ctx, ck.vol, true); verr != nil && !cerrdefs.IsNotFound(verr) {
		return fmt.Errorf("removing checkpoint volume %s (try again, or docker volume rm %s): %w", id, ck.vol, verr)
	}
	return err
}

// errNoCheckpoints is the answer of Checkpoint, Restore and Seed on a Kubernetes
// engine, which has no images to commit a container to. It is for the model to read.
var errNoCheckpoints = noCheckpoints{}

type noCheckpoints struct{}

func (noCheckpoints) Error() string {
	return "checkpoints are not supported on a Kubernetes engine: the files in " + boxapi.WorkDir +
		" stay on the sandbox's volume when it stops and starts; to keep a copy of them, pack them " +
		"into an archive (tar) and download it"
}

func (noCheckpoints) Is(target error) bool { return target == cerrdefs.ErrNotImplemented }

// Checkpoints lists this sandbox's checkpoints, oldest first, after removing what
// checkpoints that failed halfway left behind.
func (s *Sandbox) Checkpoints(ctx context.Context) ([]boxapi.Checkpoint, error) {
	all, err := Checkpoints(ctx, s.cli)
	if err != nil {
		return nil, err
	}
	s.saves.sweepCheckpoints(ctx, all)
	return s.saves.own(all), nil
}

// owns reports whether c was saved from this sandbox.
func (s *saveStore) owns(c boxapi.Checkpoint) bool { return c.Container == s.cfg.Container }

func (s *saveStore) own(all []boxapi.Checkpoint) []boxapi.Checkpoint {
	var out []boxapi.Checkpoint
	for _, c := range all {
		if s.owns(c) {
			out = append(out, c)
		}
	}
	return out
}

// CheckpointResult is what Checkpoint made, and the checkpoints it removed to keep
// MaxCheckpoints.
type CheckpointResult struct {
	Checkpoint boxapi.Checkpoint
	Dropped    []boxapi.Checkpoint
	Took       time.Duration
}

// Checkpoint saves the sandbox: its container (running, paused for the copy, or
// stopped) and boxapi.WorkDir. Running processes are not kept. Past max checkpoints (0: no
// limit), the oldest are removed. A checkpoint that fails removes what it made.
func (s *Sandbox) Checkpoint(ctx context.Context, name string, max int) (CheckpointResult, error) {
	begin := time.Now()
	if len(name) > boxapi.MaxCheckpointName {
		return CheckpointResult{}, fmt.Errorf("a checkpoint name is at most %d bytes", boxapi.MaxCheckpointName)
	}
	if !s.saves.caps().Checkpoints {
		return CheckpointResult{}, errNoCheckpoints
	}
	s.saves.ckMu.Lock()
	defer s.saves.ckMu.Unlock()
	room, err := s.saves.room(ctx, max)
	if err != nil {
		return CheckpointResult{}, err
	}
	name0 := s.cfg.Container
	info, err := s.cli.InspectBox(ctx, name0)
	if cerrdefs.IsNotFound(err) {
		return CheckpointResult{}, fmt.Errorf("%w: run a command first, then save it", boxapi.ErrNoSandbox)
	}
	if err != nil {
		return CheckpointResult{}, fmt.Errorf("inspecting sandbox container %s: %w", name0, err)
	}
	if err := s.life.commitSeesWrites(ctx, info); err != nil {
		return CheckpointResult{}, err
	}
	if info.State.Running && !info.State.Paused {
		resume, err := s.saves.pause(ctx)
		if err != nil {
			return CheckpointResult{}, err
		}
		defer resume()
	}
	id := newCheckpointID()
	checkpointsBusy.Store(id, true)
	defer checkpointsBusy.Delete(id)
	ck := boxapi.Checkpoint{ID: id, Name: name, Person: s.cfg.Person, Container: name0, Engine: s.cfg.Engine,
		CreatedAt: time.Now().UTC()}
	made := false
	defer func() {
		if !made {
			s.saves.removeCheckpoint(context.WithoutCancel(ctx), id)
		}
	}()
	if ck.SizeBytes, err = s.saves.saveCopies(ctx, &ck, room); err != nil {
		return CheckpointResult{}, err
	}
	made = true
	res := CheckpointResult{Checkpoint: ck}
	s.log.Info("saved a checkpoint", zap.String("id", id), zap.Int64("bytes", ck.SizeBytes))
	if max > 0 {
		res.Dropped = s.saves.dropPast(ctx, id, max)
	}
	res.Took = time.Since(begin)
	return res, nil
}

// checkpointRoom is what a new checkpoint may hold: room of total, the others holding held.
type checkpointRoom struct{ room, total, held int64 }

// room is the bytes left for a new checkpoint: the total allowed less what the
// checkpoints kept with it hold (past max, the oldest go once it is made).
func (s *saveStore) room(ctx context.Context, max int) (checkpointRoom, error) {
	mine, err := s.sb.Checkpoints(ctx) // sweeps leftovers first
	if err != nil {
		return checkpointRoom{}, err
	}
	r := checkpointRoom{total: s.maxCheckpointBytes()}
	kept := mine
	if max > 0 && len(kept) > max-1 {
		kept = kept[len(kept)-(max-1):]
	}
	for _, c := range kept {
		r.held += c.SizeBytes
	}
	r.room = r.total - r.held
	if r.room <= 0 {
		return checkpointRoom{}, fmt.Errorf("this sandbox's checkpoints hold %s, all of the %s they may hold together: a new one needs room; ask the person to delete old checkpoints in the console (or the operator to raise max_checkpoint_bytes), then try again",
			human.Size(r.held), human.Size(r.total))
	}
	return r, nil
}

// pause pauses the running container for a checkpoint and returns what resumes it.
// Paused, the processes write nothing while both copies are taken, so the system and
// boxapi.WorkDir are of one moment. No exec of ours is starting when the freezer acts
// (execgate.go).
func (s *saveStore) pause(ctx context.Context) (resume func(), err error) {
	name0 := s.cfg.Container
	release, err := holdExecs(ctx, name0)
	if err != nil {
		return nil, fmt.Errorf("waiting for commands starting in sandbox container %s: %w", name0, err)
	}
	saving.Store(name0, true)
	if err := dockerOf(s.cli).ContainerPause(ctx, name0); err != nil {
		saving.Delete(name0)
		release()
		return nil, fmt.Errorf("pausing sandbox container %s for the checkpoint: %w", name0, err)
	}
	return func() {
		defer release()
		// A busy host's freezer can fail to thaw at the first try (cgroup v1), and
		// an exec started by another than this process can wedge it (execgate.go):
		// try a few times before leaving it to the next command.
		var err error
		for try := 0; try < 5; try++ {
			// Bounded: an engine whose freezer is stuck holds the call forever.
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			err = dockerOf(s.cli).ContainerUnpause(uctx, name0)
			cancel()
			if err == nil || cerrdefs.IsNotFound(err) {
				break
			}
			time.Sleep(time.Duration(try+1) * 200 * time.Millisecond)
		}
		if err != nil {
			s.log.Warn("unpausing the sandbox after a checkpoint (the next command unpauses it)", zap.Error(err))
			s.sb.life.invalidate()
		}
		saving.Delete(name0)
	}, nil
}

// saveCopies takes the checkpoint ck's two copies, boxapi.WorkDir's into a volume of
// its own and the system's as an image, within r; it returns the bytes they hold.
func (s *saveStore) saveCopies(ctx context.Context, ck *boxapi.Checkpoint, r checkpointRoom) (int64, error) {
	name0, id := ck.Container, ck.ID
	sized, _, err := dockerOf(s.cli).ContainerInspectWithRaw(ctx, name0, true)
	if err != nil {
		return 0, fmt.Errorf("measuring sandbox container %s: %w", name0, err)
	}
	// Measured before anything is copied: paused or stopped, the layer stays as it is.
	var sysBytes int64
	if sized.SizeRw != nil {
		sysBytes = *sized.SizeRw
	}
	if sysBytes > min(checkpointMaxSystem, r.room) {
		return 0, fmt.Errorf("the system outside %s holds %s, over the %s this checkpoint may hold (docker commit saves sparse files at their full size): delete large files outside %s (find / -xdev -size +100M), then try again",
			boxapi.WorkDir, human.Size(sysBytes), human.Size(min(checkpointMaxSystem, r.room)), boxapi.WorkDir)
	}
	vol := checkpointVolume(name0, id)
	if _, err := dockerOf(s.cli).VolumeCreate(ctx, volume.CreateOptions{Name: vol,
		DriverOpts: volumeOptions(s.cfg.CheckpointVolumeOptions),
		Labels:     map[string]string{labelCheckpoint: id, labelCheckpointOf: name0}}); err != nil {
		return 0, fmt.Errorf("creating checkpoint volume %s: %w", vol, err)
	}
	// The data of the files, never the holes of sparse ones, within what is left.
	left := r.room - sysBytes
	out, err := s.copyVolumes(ctx, id, copierTimeout, []string{"save", "-max-bytes", strconv.FormatInt(left, 10), "/from", "/to"}, []mount.Mount{
		{Type: mount.TypeVolume, Source: s.cfg.Volume, Target: "/from", ReadOnly: true},
		{Type: mount.TypeVolume, Source: vol, Target: "/to"},
	}, nil)
	if errors.Is(err, errOverBytes) {
		return 0, fmt.Errorf("this checkpoint would hold more than the %s left of the %s this sandbox's checkpoints may hold together (%s of it outside %s): delete or archive what is not needed in %s (du -sh %s/* shows what is large), then try again; or ask the person to delete old checkpoints in the console",
			human.Size(r.room), human.Size(r.total), human.Size(sysBytes), boxapi.WorkDir, boxapi.WorkDir, boxapi.WorkDir)
	}
	if err != nil {
		return 0, fmt.Errorf("copying %s for the checkpoint: %w", boxapi.WorkDir, err)
	}
	volBytes, err := copiedBytes(out)
	if err != nil {
		return 0, fmt.Errorf("measuring the checkpoint's copy of %s: %w", boxapi.WorkDir, err)
	}
	size := sysBytes + volBytes
	labels := map[string]string{
		labelCheckpoint: id, labelCheckpointOf: name0, labelCheckpointName: ck.Name,
		labelCheckpointCreated: ck.CreatedAt.Format(time.RFC3339Nano), labelCheckpointVolume: vol,
		labelCheckpointBytes: strconv.FormatInt(size, 10),
		labelPerson:          s.cfg.Person, labelEngine: s.cfg.Engine,
	}
	if _, err := dockerOf(s.cli).ContainerCommit(ctx, name0, container.CommitOptions{
		Reference: CheckpointImage(name0, id), Pause: false, Comment: checkpointComment(id),
		Config: &container.Config{Labels: labels},
	}); err != nil {
		return 0, fmt.Errorf("saving the sandbox's system (docker commit of %s): %w", name0, err)
	}
	return size, nil
}

// dropPast deletes the oldest checkpoints past max, never the new one id, and
// returns them.
func (s *saveStore) dropPast(ctx context.Context, id string, max int) []boxapi.Checkpoint {
	list, err := s.sb.Checkpoints(ctx)
	if err != nil {
		return nil
	}
	var dropped []boxapi.Checkpoint
	for len(list) > max {
		old := list[0]
		list = list[1:]
		if old.ID == id {
			continue
		}
		if err := DeleteCheckpoint(ctx, s.cli, old.ID); err != nil && !errors.Is(err, boxapi.ErrCheckpointNotFound) {
			s.log.Warn("removing an old checkpoint past max_checkpoints", zap.String("id", old.ID), zap.Error(err))
			continue
		}
		dropped = append(dropped, old)
	}
	return dropped
}

// removeCheckpoint removes whatever a checkpoint that failed made: its image, volume
// and copying container. Failures are logged; the next list sweeps what is left.
func (s *saveStore) removeCheckpoint(ctx context.Context, id string) {
	removeCheckpoint(ctx, s.cli, s.cfg.Container, id, checkpointVolume(s.cfg.Container, id), s.log)
}

func removeCheckpoint(ctx context.Context, cli API, of, id, vol string, log *zap.Logger) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	removeCopier(ctx, cli, of, id, log)
	for _, ref := range checkpointRefs(of, id) {
		if _, err := dockerOf(cli).ImageRemove(ctx, ref, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
			log.Warn("removing a failed checkpoint's image", zap.String("id", id), zap.Error(err))
		}
	}
	if err := cli.RemoveVolume(ctx, vol, true); err != nil && !cerrdefs.IsNotFound(err) {
		log.Warn("removing a failed checkpoint's volume", zap.String("id", id), zap.Error(err))
	}
}

// sweepCheckpoints removes the copy volumes and copying containers of this sandbox's
// checkpoints that failed halfway (Caddy stopped, or the engine restarted, while one
// was made): those with no image, not being made by this process.
func (s *saveStore) sweepCheckpoints(ctx context.Context, all []boxapi.Checkpoint) {
	sweepLeftovers(ctx, s.cli, all, func(c string) bool { return c == s.cfg.Container }, s.log)
}

// SweepLeftovers removes what checkpoints that failed halfway (Caddy stopped or the
// engine restarted while one was made) left of the sandboxes whose container names
// belongs accepts, as each sandbox's own listing does: copy volumes without their
// image, copying containers, and images of deleted checkpoints no longer in use.
func SweepLeftovers(ctx context.Context, cli API, belongs func(container string) bool, log *zap.Logger) error {
	all, err := Checkpoints(ctx, cli)
	if err != nil {
		return err
	}
	sweepLeftovers(ctx, cli, all, belongs, log)
	return nil
}

// sweepLeftovers is SweepLeftovers with the checkpoints listed (all of the engine).
func sweepLeftovers(ctx context.Context, cli API, all []boxapi.Checkpoint, belongs func(container string) bool, log *zap.Logger) {
	have := map[string]bool{}
	for _, c := range all {
		have[c.ID] = true
	}
	vols, err := dockerOf(cli).VolumeList(ctx, volume.ListOptions{})
	if err != nil {
		return
	}
	for _, v := range vols.Volumes {
		id := v.Labels[labelCheckpoint]
		if !boxapi.ValidCheckpointID(id) || !isCheckpointVolume(v.Name, v.Labels[labelCheckpointOf], id) || have[id] || !belongs(v.Labels[labelCheckpointOf]) {
			continue
		}
		if _, busy := checkpointsBusy.Load(id); busy {
			continue
		}
		log.Info("removing what a checkpoint that failed halfway left", zap.String("id", id))
		removeCheckpoint(ctx, cli, v.Labels[labelCheckpointOf], id, v.Name, log)
	}
	SweepUntagged(ctx, cli, func(c boxapi.Checkpoint) bool { return belongs(c.Container) }, log)
	list, err := cli.ListBoxes(ctx, labelCheckpointCopier)
	if err != nil {
		return
	}
	for _, c := range list {
		of, id := c.Labels[labelCheckpointCopier], c.Labels[labelCheckpoint]
		if of == "" || !belongs(of) || c.Name != copierName(of, id) {
			continue
		}
		if _, busy := copiersBusy.Load(copierName(of, id)); busy {
			continue // a checkpoint's, a restore's or an unstaging's, under way
		}
		_ = cli.RemoveBox(ctx, c.ID)
	}
}

// SweepUntagged removes the images of deleted checkpoints that belongs accepts: a checkpoint deleted while a sandbox ran from it (it
// was restored) loses only its tag then, and its image and layers stay until nothing
// runs from them. Images still in use, or being made by this process, are left.
func SweepUntagged(ctx context.Context, cli API, belongs func(boxapi.Checkpoint) bool, log *zap.Logger) {
	list, err := dockerOf(cli).ImageList(ctx, image.ListOptions{})
	if err != nil {
		return
	}
	for _, im := range list {
		id := im.Labels[labelCheckpoint]
		if !boxapi.ValidCheckpointID(id) || tagged(im) || !belongs(checkpointOf(im.Labels)) {
			continue
		}
		if _, busy := checkpointsBusy.Load(id); busy {
			continue // committed, not yet tagged
		}
		// The label alone is not enough: a container restored from a checkpoint inherits
		// its image's labels, and so does an image someone commits from that container by
		// hand. Only the images Checkpoint committed carry its comment.
		if info, err := cli.InspectImage(ctx, im.ID); err != nil || info.Comment != checkpointComment(id) {
			continue
		}
		_, err := dockerOf(cli).ImageRemove(ctx, im.ID, image.RemoveOptions{PruneChildren: true})
		switch {
		case err == nil:
			log.Info("removed the image of a deleted checkpoint that a sandbox no longer runs from", zap.String("id", id))
		case !cerrdefs.IsConflict(err) && !cerrdefs.IsNotFound(err):
			log.Warn("removing the image of a deleted checkpoint", zap.String("id", id), zap.Error(err))
		}
	}
}

// copierName is the name of checkpoint id's copying container.
func (s *saveStore) copierName(id string) string { return copierName(s.cfg.Container, id) }

// copierName is the name of the copying container of sandbox container of for id.
func copierName(of, id string) string { return of + "-copy-" + id }

func (s *saveStore) removeCopier(ctx context.Context, id string) {
	removeCopier(ctx, s.cli, s.cfg.Container, id, s.log)
}

func removeCopier(ctx context.Context, cli API, of, id string, log *zap.Logger) {
	err := cli.RemoveBox(ctx, copierName(of, id))
	if err != nil && !cerrdefs.IsNotFound(err) {
		log.Warn("removing a checkpoint's copying container", zap.String("id", id), zap.Error(err))
	}
}

// copierBinary is where the agent's binary is put in a copying container.
const copierBinary = "/mcp-sandbox-copy"

// errOverBytes is a copy that stopped at its bound of bytes (the agent's exit code 3);
// errCopyStopped one whose copying container was stopped from here at its time bound.
var (
	errOverBytes   = errors.New("the copy reached its bound of bytes")
	errCopyStopped = errors.New("stopped from outside")
)

// copyVolumes runs the agent's copy mode (cmd/sandbox-agent, copy_linux.go) with args
// in a copying container with mounts, and returns the end of its output. The agent is
// ours, copied in before the container starts: the copy never depends on the `cp` of
// the image, which may copy sparse files at their full size. A non-zero exit is an
// error naming the last line it printed (such as "no space left on device"); a copy
// past its -max-bytes is errOverBytes. After limit (0: none beyond ctx) it is stopped.
// ready, when set, runs once the container exists (its volumes with it), before it
// starts; its error ends the copy.
func (s *saveStore) copyVolumes(ctx context.Context, id string, limit time.Duration, args []string, mounts []mount.Mount, ready func(context.Context) error) (string, error) {
	name := s.copierName(id)
	copiersBusy.Store(name, true)
	defer copiersBusy.Delete(name)
	img, err := s.cli.InspectImage(ctx, s.cfg.Image)
	if err != nil {
		return "", fmt.Errorf("inspecting the image %s for the copying container: %w", s.cfg.Image, err)
	}
	bin, _, ok := agentbin.Binary(img.Architecture)
	if !ok {
		return "", fmt.Errorf("the copying container needs the sandbox agent, and none is built for the image's architecture %q (only %s)",
			img.Architecture, strings.Join(agentbin.Arches(), ", "))
	}
	pids := int64(copierPids)
	init := false
	resp, err := dockerOf(s.cli).ContainerCreate(ctx, &container.Config{
		Image: s.cfg.Image, User: "root", WorkingDir: "/",
		Entrypoint: append([]string{copierBinary, "copy"}, args...), Cmd: []string{},
		Labels:          map[string]string{labelCheckpointCopier: s.cfg.Container, labelCheckpoint: id},
		NetworkDisabled: true,
	}, &container.HostConfig{
		Mounts: mounts, NetworkMode: "none", Init: &init,
		CapDrop: []string{"ALL"}, CapAdd: copierCaps, SecurityOpt: securityOpts,
		Resources: container.Resources{PidsLimit: &pids},
	}, nil, nil, name)
	if cerrdefs.IsConflict(err) {
		s.removeCopier(ctx, id)
		return s.copyVolumes(ctx, id, limit, args, mounts, ready)
	}
	if err != nil {
		return "", fmt.Errorf("creating the copying container from %s: %w", s.cfg.Image, err)
	}
	defer s.removeCopier(context.WithoutCancel(ctx), id)
	buf, err := copierTar(bin)
	if err != nil {
		return "", err
	}
	if err := s.cli.CopyIn(ctx, resp.ID, "/", buf); err != nil {
		return "", fmt.Errorf("putting the sandbox agent into the copying container%s: %w", copyFailure(err), err)
	}
	if ready != nil {
		if err := ready(ctx); err != nil {
			return "", err
		}
	}
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if limit > 0 {
		wctx, cancel = context.WithTimeout(ctx, limit)
	}
	defer cancel()
	waitC, errC := dockerOf(s.cli).ContainerWait(wctx, resp.ID, container.WaitConditionNextExit)
	if err := s.cli.StartBox(ctx, resp.ID); err != nil {
		return "", fmt.Errorf("starting the copying container: %w", err)
	}
	var code int64
	select {
	case w := <-waitC:
		if w.Error != nil {
			return "", fmt.Errorf("waiting for the copying container: %s", w.Error.Message)
		}
		code = w.StatusCode
	case err := <-errC:
		if ctx.Err() == nil && errors.Is(wctx.Err(), context.DeadlineExceeded) {
			// The deferred removeCopier kills it.
			return "", fmt.Errorf("the copy took over %s and was stopped: keep fewer files in %s (delete or archive what is not needed), then try again: %w (%w)",
				limit, boxapi.WorkDir, err, errCopyStopped)
		}
		return "", fmt.Errorf("waiting for the copying container: %w", err)
	}
	logs, err := dockerOf(s.cli).ContainerLogs(ctx, resp.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true, Tail: "20"})
	var out tailBuffer
	if err == nil {
		_, _ = stdcopy.StdCopy(&out, &out, logs)
		logs.Close()
	}
	return copyOutcome(code, out.String())
}

// copierTar is the archive that puts the agent's binary bin into a copying container.
func copierTar(bin []byte) (*bytes.Buffer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(copierBinary, "/"), Mode: 0o755,
		Size: int64(len(bin)), ModTime: time.Now()}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return &buf, nil
}

// copyOutcome reads a copying container's exit code and the end of its output out.
func copyOutcome(code int64, out string) (string, error) {
	switch code {
	case 3:
		return "", errOverBytes
	case 4:
		return "", fmt.Errorf("the copy took over %s and was stopped: keep fewer files in %s (delete or archive what is not needed), then try again",
			copierTimeout, boxapi.WorkDir)
	}
	if code != 0 {
		last := lastLine(out)
		if last == "" {
			last = "no message"
		}
		if strings.Contains(strings.ToLower(last), "no space left on device") {
			return "", fmt.Errorf("the copy failed: No space left on device where it writes (%s): delete or archive what is not needed in %s, then try again; if that is not enough, the operator must make room on the engine's disk",
				last, boxapi.WorkDir)
		}
		return "", fmt.Errorf("the copy failed (exit %d): %s", code, last)
	}
	return out, nil
}

// tailBuffer keeps the last copierOutput bytes written to it.
type tailBuffer struct{ b []byte }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > copierOutput {
		t.b = append(t.b[:0], t.b[len(t.b)-copierOutput:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.b) }

// lastLine is the last non-empty line of s, printable and at most 300 bytes: the
// copy's messages name files of the sandbox.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	l := strings.TrimSpace(lines[len(lines)-1])
	l = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, l)
	if len(l) > 300 {
		l = "…" + l[len(l)-300:]
	}
	return l
}

// copiedBytes reads the agent's last line, "copied <data bytes> <entries>", from out.
func copiedBytes(out string) (int64, error) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	f := strings.Fields(lines[len(lines)-1])
	if len(f) != 3 || f[0] != "copied" {
		return 0, fmt.Errorf("the copy printed %q", lastLine(out))
	}
	n, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("the copy printed %q", lastLine(out))
	}
	return n, nil
}

// RestoreResult is what Restore did.
type RestoreResult struct {
	Checkpoint boxapi.Checkpoint // the zero value's ID is boxapi.ImageReset for a reset
	Took       time.Duration
}

// Restore makes the sandbox checkpoint id of its own: a new container of the same
// name, limits, network, mounts and labels from the checkpoint's image, and boxapi.WorkDir
// replaced by the checkpoint's copy. Every process ends; the records of the jobs of
// before are kept, so they show as ended. id boxapi.ImageReset makes the container
// from the configured image and keeps boxapi.WorkDir. Another sandbox's checkpoint is not
// found. A restore that fails leaves the sandbox as it was.
func (s *Sandbox) Restore(ctx context.Context, id string) (RestoreResult, error) {
	return s.saves.restore(ctx, id, true)
}

// Seed makes the sandbox checkpoint id of any sandbox on its engine, as Restore does.
func (s *Sandbox) Seed(ctx context.Context, id string) (RestoreResult, error) {
	return s.saves.restore(ctx, id, false)
}

func (s *saveStore) restore(ctx context.Context, id string, own bool) (RestoreResult, error) {
	begin := time.Now()
	s.ckMu.Lock()
	defer s.ckMu.Unlock()
	ck, img, vol, err := s.source(ctx, id, own)
	if err != nil {
		return RestoreResult{}, err
	}
	name := s.cfg.Container
	// The volume exists for a sandbox being seeded that never ran.
	if err := s.cli.CreateVolume(ctx, s.cfg.Volume, map[string]string{labelManaged: "true"}); err != nil {
		return RestoreResult{}, fmt.Errorf("creating sandbox volume %s: %w", s.cfg.Volume, err)
	}
	// The old container is killed (its processes end anyway), keeps its job records
	// for the new one, and is put aside under another name until the new one runs.
	// Meanwhile Ensure waits instead of making a container of its own under the name.
	saving.Store(name, true)
	defer saving.Delete(name)
	// As Stop: no agent starts in the container being replaced.
	endStop := s.sb.link.beginStop()
	defer endStop()
	s.sb.life.invalidate()
	old, err := s.cli.InspectBox(ctx, name)
	hadOld := err == nil
	if err != nil && !cerrdefs.IsNotFound(err) {
		return RestoreResult{}, fmt.Errorf("inspecting sandbox container %s: %w", name, err)
	}
	aside := name + "-replaced-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	wasRunning := hadOld && old.State.Running
	rollback := func(why error) (RestoreResult, error) {
		bg := context.WithoutCancel(ctx)
		_ = s.cli.RemoveBox(bg, name)
		if hadOld {
			if err := s.cli.RenameBox(bg, old.ID, name); err != nil {
				s.log.Error("putting the sandbox back after a failed restore", zap.Error(err))
			} else if wasRunning && s.cli.StartBox(bg, name) == nil {
				s.sb.link.agentFresh()
			}
		}
		s.sb.life.invalidate()
		return RestoreResult{}, why
	}
	if wasRunning {
		if err := s.cli.KillBox(ctx, old.ID); err != nil && !cerrdefs.IsConflict(err) {
			return rollback(fmt.Errorf("stopping sandbox container %s: %w", name, err))
		}
	}
	if hadOld {
		if err := s.cli.RenameBox(ctx, old.ID, aside); err != nil {
			return rollback(fmt.Errorf("putting sandbox container %s aside: %w", name, err))
		}
	}
	err = s.sb.life.createFrom(ctx, img, func(ctx context.Context, newID string) error {
		oldID := ""
		if hadOld {
			oldID = old.ID
		}
		return s.fill(ctx, newID, oldID, id, vol)
	})
	if err != nil {
		if errors.Is(err, errHalfway) {
			return rollback(fmt.Errorf("restoring the sandbox (its processes ended; its system is as it was): %w", err))
		}
		return rollback(fmt.Errorf("restoring the sandbox (it is as it was; its processes ended): %w", err))
	}
	if hadOld {
		// Its writable layer may be large: removed after the restore has answered.
		go s.removeReplaced(context.WithoutCancel(ctx), old.ID, aside)
	}
	s.sb.mu.Lock()
	s.sb.life.warnedImage = id != boxapi.ImageReset // a checkpoint's image is meant to differ
	s.sb.mu.Unlock()
	// The new container runs (createFrom gave its agent a fresh try): agents may start.
	endStop()
	saving.Delete(name)
	if err := s.sb.Ensure(ctx); err != nil {
		return RestoreResult{}, fmt.Errorf("starting the restored sandbox: %w", err)
	}
	s.log.Info("restored the sandbox", zap.String("checkpoint", id), zap.Duration("took", time.Since(begin)))
	return RestoreResult{Checkpoint: ck, Took: time.Since(begin)}, nil
}

// checkCopy makes sure checkpoint id's copy of boxapi.WorkDir is the one Checkpoint
// made: a volume of that name without its label is one the engine made, empty, when a
// source finds what a restore of id starts from: the checkpoint, its image and the
// volume of its copy of boxapi.WorkDir (the image and none for boxapi.ImageReset). own
// refuses another sandbox's checkpoint.
func (s *saveStore) source(ctx context.Context, id string, own bool) (ck boxapi.Checkpoint, img, vol string, err error) {
	if id == boxapi.ImageReset {
		return boxapi.Checkpoint{ID: boxapi.ImageReset}, s.cfg.Image, "", nil
	}
	if !s.caps().Checkpoints {
		return ck, "", "", errNoCheckpoints
	}
	found, err := findStored(ctx, s.cli, id)
	if err != nil {
		return ck, "", "", err
	}
	if own && found.Container != s.cfg.Container {
		return ck, "", "", fmt.Errorf("%w: %s", boxapi.ErrCheckpointNotFound, id)
	}
	if err := s.checkCopy(ctx, id, found.vol); err != nil {
		return ck, "", "", err
	}
	return found.Checkpoint, found.ref, found.vol, nil
}

// fill fills the new container newID of a restore of checkpoint id (its copy of
// boxapi.WorkDir in the volume vol) before it starts: the job records of the old
// container oldID ("" none) come along, and for a checkpoint the copy replaces the
// volume's files.
func (s *saveStore) fill(ctx context.Context, newID, oldID, id, vol string) error {
	if id == boxapi.ImageReset {
		if oldID != "" {
			if err := s.carryJobs(ctx, oldID, newID); err != nil {
				return fmt.Errorf("keeping the job records (make room in %s): %w", JobsDir, err)
			}
		}
		return nil
	}
	// The job records are carried while /sandbox is copied: they only say which jobs
	// of before ended, and a failure to carry them is logged, never a reason to
	// undo a restore whose files are in place.
	carried := make(chan error, 1)
	if oldID != "" {
		go func() { carried <- s.carryJobs(ctx, oldID, newID) }()
	} else {
		carried <- nil
	}
	defer func() {
		if err := <-carried; err != nil {
			s.log.Warn("the job records of before the restore were not kept", zap.Error(err))
		}
	}()
	// One run of the agent: the copy goes beside the current files, under a name
	// chosen now, so a full disk or the time bound stops it before anything is
	// replaced; then it is swapped in with renames, which no time bound cuts
	// halfway, and the replaced files are deleted. A failure moves everything
	// back and deletes only its own copy.
	suffix := restoreSuffix()
	mounts := []mount.Mount{
		{Type: mount.TypeVolume, Source: vol, Target: "/from", ReadOnly: true},
		{Type: mount.TypeVolume, Source: s.cfg.Volume, Target: "/to"},
	}
	// The time bound is the agent's own, for the copy; the one here only ends an
	// agent that hangs.
	_, err := s.copyVolumes(ctx, id, copierTimeout+restoreGrace, []string{"restore", "-suffix", suffix,
		"-timeout", copierTimeout.String(), "/from", "/to"}, mounts, func(ctx context.Context) error {
		// Mounted by the copying container, the copy cannot be deleted until it ends;
		// deleted before, the engine made an empty volume under its name.
		return s.checkCopy(ctx, id, vol)
	})
	if errors.Is(err, errCopyStopped) {
		// The agent keeps its own time bound; stopped from here, it hung, perhaps
		// halfway through the renames.
		return fmt.Errorf("%w: the restore's copy hung and was stopped; the files of before may be in %s/.mcp-sandbox-replaced-%s and the checkpoint's in %s/.mcp-sandbox-restore-%s: move back what is needed, then delete those",
			errHalfway, boxapi.WorkDir, suffix, boxapi.WorkDir, suffix)
	}
	if err != nil {
		return fmt.Errorf("copying the checkpoint's %s: %w", boxapi.WorkDir, err)
	}
	return nil
}

// removeReplaced removes the container a restore replaced, put aside under aside.
func (s *saveStore) removeReplaced(ctx context.Context, oldID, aside string) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := s.cli.RemoveBox(rctx, oldID); err != nil {
		s.log.Warn("removing the replaced sandbox container", zap.String("name", aside), zap.Error(err))
		return
	}
	// The checkpoint it ran from may have been deleted meanwhile.
	SweepUntagged(rctx, s.cli, s.owns, s.log)
}

// copying container mounted it after the copy was deleted; it is removed.
func (s *saveStore) checkCopy(ctx context.Context, id, vol string) error {
	v, err := s.cli.InspectVolume(ctx, vol)
	if err == nil && v.Labels[labelCheckpoint] == id {
		return nil
	}
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("inspecting checkpoint %s's copy of %s: %w", id, boxapi.WorkDir, err)
	}
	if err == nil {
		if rerr := s.cli.RemoveVolume(context.WithoutCancel(ctx), v.Name, true); rerr != nil && !cerrdefs.IsNotFound(rerr) {
			s.log.Warn("removing an empty volume under a checkpoint's name", zap.String("volume", v.Name), zap.Error(rerr))
		}
	}
	return fmt.Errorf("checkpoint %s has lost its copy of %s (it was deleted, or removed from the engine): restore another checkpoint; this one can only be deleted", id, boxapi.WorkDir)
}

// errHalfway is a restore stopped where /sandbox may be half replaced.
var errHalfway = errors.New("the restore was stopped halfway")

// restoreGrace is how long past copierTimeout a restore's copying container may run
// before it is stopped: the agent stops its copy at copierTimeout itself, and then
// needs time to remove it, or to swap and delete the replaced files.
var restoreGrace = 5 * time.Minute

// restoreSuffix names a restore's directories in boxapi.WorkDir (see the agent's copy
// mode): 16 random hex digits, chosen when the restore begins, which neither the
// sandbox nor its checkpoint can name beforehand.
func restoreSuffix() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// carryJobs copies the job records of container from into container to, so the jobs
// of before a restore show as ended (their runners are gone) instead of vanishing.
// The archive comes from the sandbox: only regular files directly in the jobs
// directory pass, within carryMaxBytes and carryMaxEntries; past them the rest is
// left behind (the restore goes on).
func (s *saveStore) carryJobs(ctx context.Context, from, to string) error {
	rc, _, err := s.cli.CopyOut(ctx, from, JobsDir)
	if cerrdefs.IsNotFound(err) {
		return nil // no job ever ran
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", JobsDir, err)
	}
	defer rc.Close()
	pr, pw := io.Pipe()
	ferr := make(chan error, 1)
	var left int
	go func() {
		n, err := filterJobs(rc, pw)
		left = n
		ferr <- err
		pw.CloseWithError(err)
	}()
	err = s.cli.CopyIn(ctx, to, "/", pr)
	pr.CloseWithError(io.ErrClosedPipe)
	// The archive's own failure is the reason: the engine's is only that the upload
	// it was reading broke off.
	if fe := <-ferr; fe != nil {
		return fmt.Errorf("reading the records in %s: %w", JobsDir, fe)
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", JobsDir, err)
	}
	if left > 0 {
		s.log.Warn("the job records past the bounds were not kept over the restore",
			zap.Int("max_entries", carryMaxEntries), zap.Int64("max_bytes", carryMaxBytes))
	}
	return nil
}

// filterJobs writes to w an archive, rooted at /, of the regular files directly in
// the jobs directory found in the archive r (as Docker reads JobsDir): the first
// carryMaxEntries entries, as long as the files stay within carryMaxBytes. left is 1
// when it stopped there, leaving the rest out.
func filterJobs(r io.Reader, w io.Writer) (left int, err error) {
	tw := tar.NewWriter(w)
	base := strings.TrimPrefix(JobsDir, "/")
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: base + "/", Mode: 0o755, ModTime: time.Now()}); err != nil {
		return 0, err
	}
	tr := tar.NewReader(r)
	var total int64
	for n := 0; ; n++ {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("reading %s's archive: %w", JobsDir, err)
		}
		dir, file := path.Split(path.Clean(h.Name))
		if h.Typeflag != tar.TypeReg || dir != path.Base(JobsDir)+"/" || file == "" || strings.HasPrefix(file, ".") {
			continue
		}
		if n >= carryMaxEntries || total+h.Size > carryMaxBytes {
			left = 1 // at least; the rest of the archive is not read
			break
		}
		total += h.Size
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: base + "/" + file, Size: h.Size,
			Mode: h.Mode & 0o777, ModTime: h.ModTime}); err != nil {
			return 0, err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return 0, fmt.Errorf("reading %s's archive: %w", JobsDir, err)
		}
	}
	return left, tw.Close()
}

// volumeOptions reads CheckpointVolumeOptions.
func volumeOptions(s string) map[string]string {
	var m map[string]string
	for _, kv := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		if m == nil {
			m = map[string]string{}
		}
		m[k] = v
	}
	return m
}

// DefaultMaxCheckpointBytes is MaxCheckpointBytes' default: five checkpoints of 2 GiB.
const DefaultMaxCheckpointBytes int64 = 10 << 30

// maxCheckpointBytes is MaxCheckpointBytes with its default.
func (s *saveStore) maxCheckpointBytes() int64 {
	if s.cfg.MaxCheckpointBytes > 0 {
		return s.cfg.MaxCheckpointBytes
	}
	return DefaultMaxCheckpointBytes
}
