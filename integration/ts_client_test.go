package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// tsResult is what testdata/ts-client/run.mjs prints.
type tsResult struct {
	Steps       []map[string]any `json:"steps"`
	Tools       []string         `json:"tools"`
	Execute     map[string]any   `json:"execute"`
	ExecuteText string           `json:"executeText"`
	Progress    []string         `json:"progress"`
	Share       map[string]any   `json:"share"`
	Download    string           `json:"download"`
	Error       string           `json:"error"`
}

// runTSClient drives the site with the official TypeScript MCP SDK.
func runTSClient(t *testing.T, s *testsite.Site, mode string) tsResult {
	t.Helper()
	res, err := tsClient(s, mode, s.Key)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// tsClient runs testdata/ts-client/run.mjs with key (the API key or a person's), in
// mode bearer or oauth; it is safe to run several at once.
func tsClient(s *testsite.Site, mode, key string) (tsResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "testdata/ts-client/run.mjs", s.URL, mode, key)
	out, err := cmd.Output()
	var res tsResult
	if jerr := json.Unmarshal(out, &res); jerr != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		return res, fmt.Errorf("TypeScript client (%v) printed %q: %v\n%s\n(run scripts/test-deps.sh if the SDK is missing)", err, out, jerr, stderr)
	}
	if err != nil || res.Error != "" {
		return res, fmt.Errorf("TypeScript client failed: %v\n%s\nsteps: %v", err, res.Error, res.Steps)
	}
	return res, nil
}

func checkTSResult(t *testing.T, res tsResult) {
	t.Helper()
	for _, want := range []string{"execute", "share_file", "read_file", "write_file", "edit_file", "upload_link", "job_output"} {
		if !slices.Contains(res.Tools, want) {
			t.Errorf("tools = %v, want %s among them", res.Tools, want)
		}
	}
	if res.Execute["stdout"] != "step-1\nstep-2\nstep-3\n" || res.Execute["stderr"] != "bad\n" || res.Execute["exit_code"] != float64(4) {
		t.Errorf("execute = %v", res.Execute)
	}
	if !strings.Contains(res.ExecuteText, "exit code 4") {
		t.Errorf("execute text = %q", res.ExecuteText)
	}
	if len(res.Progress) == 0 || !strings.Contains(strings.Join(res.Progress, "\n"), "step-1") {
		t.Errorf("progress = %q", res.Progress)
	}
	if res.Download != "shared bytes" {
		t.Errorf("download = %q (share %v)", res.Download, res.Share)
	}
}

func TestTypeScriptSDKBearer(t *testing.T) {
	s := testsite.Start(t, testsite.Options{})
	checkTSResult(t, runTSClient(t, s, "bearer"))
}

// TestTypeScriptSDKOAuth: the SDK's own OAuth client finds the metadata from the 401,
// registers, sends the person to the sign-in page (played here by fetching the form
// and posting the key), exchanges the code with PKCE and uses the token.
func TestTypeScriptSDKOAuth(t *testing.T) {
	s := testsite.Start(t, testsite.Options{Directive: []string{"api_key_bearer off"}})
	res := runTSClient(t, s, "oauth")
	checkTSResult(t, res)
	var sawUnauthorized, sawRegistered, sawTokens bool
	for _, st := range res.Steps {
		if st["unauthorizedFirst"] == true {
			sawUnauthorized = true
			if st["authorizeURL"] != s.URL+"/authorize" {
				t.Errorf("authorize URL = %v", st["authorizeURL"])
			}
		}
		if st["registered"] == true {
			sawRegistered = true
		}
		if tk, ok := st["tokens"].(map[string]any); ok && tk["access"] == true && tk["refresh"] == true {
			sawTokens = true
		}
		if si, ok := st["signIn"].(map[string]any); ok && si["iss"] != s.URL {
			t.Errorf("iss = %v, want %s", si["iss"], s.URL)
		}
	}
	if !sawUnauthorized || !sawRegistered || !sawTokens {
		t.Fatalf("flow incomplete: %v", res.Steps)
	}
}

// TestTypeScriptSDKLongCommand: a 150 s command followed the way claude.ai must (each
// request gives up after 60 s, progress does not extend that) finishes through execute
// and job_output: every line exactly once, in order, and the exit code.
func TestTypeScriptSDKLongCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 150 s")
	}
	s := testsite.Start(t, testsite.Options{}) // the default yield_after, 45s
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const n = 150
	cmd := exec.CommandContext(ctx, "node", "testdata/ts-client/jobs.mjs", s.URL, s.Key,
		fmt.Sprintf("for i in $(seq 1 %d); do echo line-$i; sleep 1; done; echo done >&2; exit 3", n))
	out, err := cmd.Output()
	var res struct {
		Calls []struct {
			Ms      float64 `json:"ms"`
			Running bool    `json:"running"`
		} `json:"calls"`
		Stdout   string   `json:"stdout"`
		Stderr   string   `json:"stderr"`
		ExitCode *float64 `json:"exit_code"`
		Error    string   `json:"error"`
		Text     string   `json:"text"`
	}
	if jerr := json.Unmarshal(out, &res); jerr != nil || err != nil || res.Error != "" {
		t.Fatalf("TypeScript client: %v %v %s\n%s", err, jerr, res.Error, out)
	}
	var want strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&want, "line-%d\n", i)
	}
	if res.Stdout != want.String() || res.Stderr != "done\n" {
		t.Errorf("output differs: %d bytes of stdout (want %d), stderr %q", len(res.Stdout), want.Len(), res.Stderr)
	}
	if res.ExitCode == nil || *res.ExitCode != 3 || !strings.Contains(res.Text, "exit code 3") {
		t.Errorf("exit code %v, text %q", res.ExitCode, res.Text)
	}
	for _, c := range res.Calls {
		if c.Ms > 50_000 {
			t.Errorf("a call took %.0f ms, too close to the client's 60 s deadline", c.Ms)
		}
	}
	t.Logf("%d calls: %+v", len(res.Calls), res.Calls)
}

// TestTypeScriptSDKTasks: execute declares optional task support; a task-augmented
// call through the SDK's experimental tasks client returns the command's result, the
// task shows in tasks/list, and tasks/cancel kills the command.
func TestTypeScriptSDKTasks(t *testing.T) {
	// yield_after is shorter than the command: a task waits for the end regardless.
	s := testsite.Start(t, testsite.Options{Directive: []string{"yield_after 2s"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "node", "testdata/ts-client/tasks.mjs", s.URL, s.Key).Output()
	var res struct {
		Tools []struct {
			Name      string         `json:"name"`
			Execution map[string]any `json:"execution"`
		} `json:"tools"`
		Messages    []string       `json:"messages"`
		Result      map[string]any `json:"result"`
		TaskID      string         `json:"taskId"`
		Listed      []string       `json:"listed"`
		CancelID    string         `json:"cancelId"`
		AfterCancel string         `json:"afterCancel"`
		Error       string         `json:"error"`
	}
	if jerr := json.Unmarshal(out, &res); jerr != nil || err != nil || res.Error != "" {
		t.Fatalf("TypeScript tasks client: %v %v %s\n%s", err, jerr, res.Error, out)
	}
	for _, tool := range res.Tools {
		if tool.Name == "execute" && tool.Execution["taskSupport"] != "optional" {
			t.Errorf("execute execution = %v", tool.Execution)
		}
	}
	if res.TaskID == "" || res.Result["stdout"] != "t-1\nt-2\nt-3\n" || res.Result["exit_code"] != float64(2) {
		t.Errorf("task result: %v (messages %v)", res.Result, res.Messages)
	}
	if !strings.Contains(strings.Join(res.Listed, ","), res.CancelID+":working") {
		t.Errorf("tasks/list = %v, want %s working", res.Listed, res.CancelID)
	}
	if res.AfterCancel != "cancelled" {
		t.Errorf("status after tasks/cancel = %q", res.AfterCancel)
	}
	testenv.WaitFor(t, 15*time.Second, "the cancelled task's command to be killed", func() bool {
		return !strings.Contains(s.TryExec("ps -o args"), "sleep 4545")
	})
}
