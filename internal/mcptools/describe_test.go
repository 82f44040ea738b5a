package mcptools

import (
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
)

func TestDescribeFacts(t *testing.T) {
	for _, tc := range []struct {
		f    *boxapi.Facts
		want string
	}{
		{nil, ""},
		{&boxapi.Facts{Programs: []string{}}, " Installed: only the base system (no python3, pip3, node, npm or git)."},
		{&boxapi.Facts{Programs: []string{"python3", "node", "git"}, PythonModules: []string{"numpy", "pandas"}},
			" Installed: python3 (numpy, pandas), node, git. Not installed: pip3, npm."},
		{&boxapi.Facts{Programs: []string{"python3", "jq"}}, " Installed: python3, jq. Not installed: pip3, node, npm, git."},
		{&boxapi.Facts{Programs: []string{"python3", "pip3", "node", "npm", "git"}}, " Installed: python3, pip3, node, npm, git."},
	} {
		if got := describeFacts(tc.f); got != tc.want {
			t.Errorf("describeFacts(%+v) = %q, want %q", tc.f, got, tc.want)
		}
	}
}

// TestDescribeFactsOnlyKnownNames: whatever facts hold, the sentence names only
// programs and modules detection looks for.
func TestDescribeFactsOnlyKnownNames(t *testing.T) {
	f := &boxapi.Facts{
		Programs:      []string{"python3", testenv.PlantedNotice, "git", "git"},
		PythonModules: []string{"numpy", testenv.PlantedNotice},
	}
	if got, want := describeFacts(f), " Installed: python3 (numpy), git. Not installed: pip3, node, npm."; got != want {
		t.Errorf("describeFacts = %q, want %q", got, want)
	}
	if got := describeFacts(&boxapi.Facts{Programs: []string{testenv.PlantedNotice}}); got != " Installed: only the base system (no python3, pip3, node, npm or git)." {
		t.Errorf("describeFacts of nothing known = %q", got)
	}
}

// TestDescriptionStatesRealCPUs: the description and the instructions state the CPUs
// the sandbox gets (Box.CPUs: the smaller of cpus and the host's), not the setting.
func TestDescriptionStatesRealCPUs(t *testing.T) {
	h := newToolsHarness(t)
	h.box.cpus = 2 // cpus is 3
	desc := h.description("execute")
	init := h.rpc("initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "test", "version": "1"}})
	for name, text := range map[string]string{"execute description": desc, "instructions": init["instructions"].(string)} {
		if !strings.Contains(text, ", 2 CPUs and") || strings.Contains(text, "3 CPUs") {
			t.Errorf("%s does not say 2 CPUs: %q", name, text)
		}
	}
}

// TestInstructionsFollowNetwork: an offline sandbox is never told that what it
// installs persists; an online one is, once.
func TestInstructionsFollowNetwork(t *testing.T) {
	for _, network := range []string{"none", "bridge"} {
		h := newToolsHarness(t, func(o *Options) { o.Config.NetworkMode = network })
		init := h.rpc("initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
			"clientInfo": map[string]any{"name": "test", "version": "1"}})
		text := init["instructions"].(string)
		offline := network == "none"
		persist := strings.Count(text, "packages persist") + strings.Count(text, "packages you install persist")
		if offline && (persist > 0 || !strings.Contains(text, "downloads and package installs fail, so use what is installed") || strings.Contains(text, "pip, npm")) || !offline && persist != 1 {
			t.Errorf("network %s: instructions %q", network, text)
		}
		if strings.Contains(text, "offline") != offline {
			t.Errorf("network %s: instructions say offline = %v: %q", network, !offline, text)
		}
	}
}

// TestDescriptionStatesIdleStop: with idle_stop, execute says what a stop keeps (files)
// and what it ends (processes); without it, nothing.
func TestDescriptionStatesIdleStop(t *testing.T) {
	if desc := newToolsHarness(t).description("execute"); strings.Contains(desc, "stops") {
		t.Errorf("without idle_stop: %q", desc)
	}
	desc := newToolsHarness(t, func(o *Options) { o.IdleStop = 30 * time.Minute }).description("execute")
	if !strings.Contains(desc, "After 30m without calls, previews, transfers or job output the sandbox stops: files stay, processes and jobs end; the next call starts it again.") {
		t.Errorf("with idle_stop 30m: %q", desc)
	}
	// On an engine that makes the sandbox again from its image (Kubernetes), only
	// /sandbox is said to stay.
	desc = newToolsHarness(t, func(o *Options) { o.IdleStop = 30 * time.Minute; o.Ephemeral = true }).description("execute")
	if !strings.Contains(desc, "files under /sandbox stay; processes, jobs and everything outside /sandbox (installed packages) are gone") || strings.Contains(desc, "files stay,") {
		t.Errorf("with idle_stop 30m, ephemeral: %q", desc)
	}
}

// TestInstructionsSayPortsUnreachable: without previews, the instructions and execute's
// description say the person cannot reach the sandbox's ports, and what to do instead;
// with previews, they point at expose_port.
func TestInstructionsSayPortsUnreachable(t *testing.T) {
	for _, previews := range []bool{false, true} {
		h := newToolsHarness(t, func(o *Options) {
			if !previews {
				o.Previews = nil
			}
		})
		init := h.rpc("initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
			"clientInfo": map[string]any{"name": "test", "version": "1"}})
		text, desc := init["instructions"].(string), h.description("execute")
		unreachable := strings.Contains(text, "The user cannot reach ports in the sandbox (this server has no previews): never tell them to open localhost") &&
			strings.Contains(text, "a web app that needs its server cannot be shown to them here") &&
			strings.Contains(text, "an HTML page shared with share_file downloads as a file and cannot reach any server, so it works only when self-contained") &&
			strings.Contains(text, "tell the user that the server's operator can turn on previews") &&
			strings.Contains(h.description("share_file"), "A web app that needs its server cannot be shown (no previews here).") &&
			strings.Contains(desc, "The user cannot open ports in the sandbox (no previews here; localhost is their own machine)")
		pointed := strings.Contains(text, "use expose_port") && strings.Contains(desc, "use expose_port") &&
			strings.Contains(h.description("share_file"), "For a web app that needs its server, use expose_port.")
		// Whatever the previews, share_file says that a page downloads, unserved.
		if d := h.description("share_file"); !strings.Contains(d, "anything else downloads, HTML too: a page is a file, not a site, and reaches no server, so share only self-contained pages") {
			t.Errorf("share_file: %q", d)
		}
		if unreachable == previews || pointed != previews {
			t.Errorf("previews %v: instructions %q\nexecute: %q", previews, text, desc)
		}
	}
}
