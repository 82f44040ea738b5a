package mcpsandbox

import (
	"context"
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
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
func runTSClient(t *testing.T, s *site, mode string) tsResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "testdata/ts-client/run.mjs", s.url, mode, s.key)
	out, err := cmd.Output()
	var res tsResult
	if jerr := json.Unmarshal(out, &res); jerr != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("TypeScript client (%v) printed %q: %v\n%s\n(run scripts/test-deps.sh if the SDK is missing)", err, out, jerr, stderr)
	}
	if err != nil || res.Error != "" {
		t.Fatalf("TypeScript client failed: %v\n%s\nsteps: %v", err, res.Error, res.Steps)
	}
	return res
}

func checkTSResult(t *testing.T, res tsResult) {
	t.Helper()
	for _, want := range []string{"execute", "share_file", "read_file", "write_file", "edit_file", "upload_link"} {
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
	s := startSite(t, siteOptions{})
	checkTSResult(t, runTSClient(t, s, "bearer"))
}

// TestTypeScriptSDKOAuth: the SDK's own OAuth client finds the metadata from the 401,
// registers, sends the person to the sign-in page (played here by fetching the form
// and posting the key), exchanges the code with PKCE and uses the token.
func TestTypeScriptSDKOAuth(t *testing.T) {
	s := startSite(t, siteOptions{directive: []string{"api_key_bearer off"}})
	res := runTSClient(t, s, "oauth")
	checkTSResult(t, res)
	var sawUnauthorized, sawRegistered, sawTokens bool
	for _, st := range res.Steps {
		if st["unauthorizedFirst"] == true {
			sawUnauthorized = true
			if st["authorizeURL"] != s.url+"/authorize" {
				t.Errorf("authorize URL = %v", st["authorizeURL"])
			}
		}
		if st["registered"] == true {
			sawRegistered = true
		}
		if tk, ok := st["tokens"].(map[string]any); ok && tk["access"] == true && tk["refresh"] == true {
			sawTokens = true
		}
		if si, ok := st["signIn"].(map[string]any); ok && si["iss"] != s.url {
			t.Errorf("iss = %v, want %s", si["iss"], s.url)
		}
	}
	if !sawUnauthorized || !sawRegistered || !sawTokens {
		t.Fatalf("flow incomplete: %v", res.Steps)
	}
}
