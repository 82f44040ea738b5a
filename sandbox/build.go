package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/pkg/jsonmessage"
)

// BuildImage builds tag from dockerfile, with a build context that holds only the
// Dockerfile, through the Docker API. Each line of the build's output is passed to
// onLine (which may be nil) as it arrives. It uses the classic builder, which needs no
// frontend image from a registry.
func BuildImage(ctx context.Context, cli API, tag string, dockerfile []byte, onLine func(string)) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(dockerfile))}); err != nil {
		return fmt.Errorf("packing build context: %w", err)
	}
	if _, err := tw.Write(dockerfile); err != nil {
		return fmt.Errorf("packing build context: %w", err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("packing build context: %w", err)
	}
	resp, err := dockerOf(cli).ImageBuild(ctx, &buf, build.ImageBuildOptions{
		Tags:        []string{tag},
		Dockerfile:  "Dockerfile",
		Remove:      true,
		ForceRemove: true,
		Version:     build.BuilderV1,
		Labels:      map[string]string{labelManaged: "true"},
	})
	if err != nil {
		return fmt.Errorf("starting image build: %w", err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	var last string
	for {
		var m jsonmessage.JSONMessage
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return fmt.Errorf("reading image build output: %w", err)
		}
		if m.Error != nil {
			return fmt.Errorf("building image %s: %s", tag, strings.TrimSpace(m.Error.Message))
		}
		for _, line := range strings.Split(strings.TrimRight(m.Stream, "\n"), "\n") {
			if line = strings.TrimSpace(line); line != "" {
				last = line
				if onLine != nil {
					onLine(line)
				}
			}
		}
	}
	if _, err := cli.InspectImage(ctx, tag); err != nil {
		return fmt.Errorf("building image %s: the build ended without the image (last output: %q): %w", tag, last, err)
	}
	return nil
}
