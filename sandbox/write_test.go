package sandbox

import (
	"context"
	"errors"
	"testing"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

func TestWriteFileEdges(t *testing.T) {
	cli := dockerClient(t)
	sb := newTestSandbox(t, cli, testConfig(t))
	ctx := context.Background()
	mustExec(t, sb, "mkdir -p /sandbox/d && echo x > /sandbox/f && ln -s /sandbox/target.txt /sandbox/dangling && ln -s f /sandbox/to-f && mkfifo /sandbox/fifo", boxapi.ExecOptions{})
	// Through a dangling link, as a shell redirection would.
	if _, created, err := sb.WriteFile(ctx, "/sandbox/dangling", []byte("via link")); err != nil || !created {
		t.Fatalf("dangling link: %v %v", created, err)
	}
	if res := mustExec(t, sb, "cat /sandbox/target.txt; test -L /sandbox/dangling && echo link", boxapi.ExecOptions{}); res.Stdout != "via linklink\n" {
		t.Errorf("dangling link: %q", res.Stdout)
	}
	// Through a link to an existing file.
	if _, created, err := sb.WriteFile(ctx, "/sandbox/to-f", []byte("y")); err != nil || created {
		t.Fatalf("link to file: %v %v", created, err)
	}
	if res := mustExec(t, sb, "cat /sandbox/f; test -L /sandbox/to-f && echo link", boxapi.ExecOptions{}); res.Stdout != "ylink\n" {
		t.Errorf("link to file: %q", res.Stdout)
	}
	for p, want := range map[string]error{
		"/sandbox/d":        boxapi.ErrIsDir,
		"/sandbox/fifo":     boxapi.ErrNotRegular,
		"/sandbox/f/under":  boxapi.ErrNotRegular,
		"relative/path.txt": boxapi.ErrRelativePath,
	} {
		if _, _, err := sb.WriteFile(ctx, p, []byte("z")); !errors.Is(err, want) {
			t.Errorf("WriteFile(%s) = %v, want %v", p, err, want)
		}
	}
	var match *boxapi.MatchError
	if _, err := sb.EditFile(ctx, "/sandbox/f", "nothing", "z"); !errors.As(err, &match) || match.Count != 0 {
		t.Errorf("EditFile without a match: %v", err)
	}
	// Without a match, the error says where the text comes closest.
	if _, _, err := sb.WriteFile(ctx, "/sandbox/near.py", []byte("def f():\n\treturn 1\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.EditFile(ctx, "/sandbox/near.py", "def f():\n    return 1\n", "z"); !errors.As(err, &match) || match.Near == nil ||
		*match.Near != (boxapi.Near{Line: 2, FileLine: "\treturn 1", TextLine: "    return 1", Matched: 1, Whitespace: true}) {
		t.Errorf("EditFile near a match: %v %+v", err, match)
	}
}
