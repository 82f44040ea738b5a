package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/links"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// TestUploadThroughSymlinkReportsRealPath: an upload link for a directory that is a
// symbolic link reports, in its answer and in the audit log, where the file really went;
// a directory whose real path is not one line of text is refused with nothing written.
func TestUploadThroughSymlinkReportsRealPath(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker and a real Caddy")
	}
	s := testsite.Start(t, testsite.Options{})
	ctx := context.Background()
	testsite.Call(ctx, t, s.Client(ctx), "execute", map[string]any{"command": "true"}) // creates the container
	s.ContainerExec(`mkdir -p /tmp/real /sandbox/target "$(printf '/tmp/a\nb')" &&
		ln -s /tmp/real /sandbox/link && ln -s /sandbox/target /sandbox/vlink && ln -s "$(printf '/tmp/a\nb')" /sandbox/nl`)

	for _, tc := range []struct{ dir, name, want string }{
		{"/sandbox/link", "off-volume.txt", "/tmp/real/off-volume.txt"},      // through cat in an exec
		{"/sandbox/vlink", "on-volume.txt", "/sandbox/target/on-volume.txt"}, // through the archive API
	} {
		link := uploadLinkFor(ctx, t, s, map[string]any{"directory": tc.dir})["url"].(string)
		code, body := put(t, link, tc.name, strings.NewReader("hello"), 5, "Accept", "application/json")
		var res links.UploadResult
		if code != 201 || json.Unmarshal([]byte(body), &res) != nil {
			t.Fatalf("PUT into %s: %d %s", tc.dir, code, body)
		}
		if res.Path != tc.want || !strings.Contains(res.Message, tc.want) {
			t.Errorf("PUT into %s answered path %q (%q), want %s", tc.dir, res.Path, res.Message, tc.want)
		}
		if got := s.ContainerExec("cat " + tc.want); got != "hello" {
			t.Errorf("%s holds %q", tc.want, got)
		}
		code, body = put(t, link, tc.name, strings.NewReader("plain"), 5)
		if want := strings.TrimSuffix(tc.want, ".txt") + " (1).txt"; code != 201 || !strings.Contains(body, "Saved "+want) {
			t.Errorf("plain-text answer for a second PUT into %s: %d %q, want it to name %s", tc.dir, code, body, want)
		}
	}
	var paths []string
	for _, e := range activity(t, s, "tool=upload") {
		var args map[string]string
		if err := json.Unmarshal([]byte(e.Args), &args); err != nil {
			t.Fatalf("audit args %q: %v", e.Args, err)
		}
		paths = append(paths, args["path"])
	}
	for _, want := range []string{"/tmp/real/off-volume.txt", "/tmp/real/off-volume (1).txt", "/sandbox/target/on-volume.txt"} {
		found := false
		for _, p := range paths {
			found = found || p == want
		}
		if !found {
			t.Errorf("the audit log has no upload to %s: %q", want, paths)
		}
	}

	// A real path with a newline cannot be reported on one line: refused, nothing left.
	link := uploadLinkFor(ctx, t, s, map[string]any{"directory": "/sandbox/nl"})["url"].(string)
	if code, body := put(t, link, "x.txt", strings.NewReader("hello"), 5); code != 409 || !strings.Contains(body, "cannot be used") {
		t.Errorf("PUT into a directory whose real path has a newline: %d %q, want 409", code, body)
	}
	if got := s.ContainerExec(`ls -A "$(printf '/tmp/a\nb')"`); got != "" {
		t.Errorf("left behind: %q", got)
	}
}
