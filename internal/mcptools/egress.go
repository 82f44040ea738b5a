package mcptools

import (
	"regexp"
	"strings"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// Egress is a sandbox's way out when the operator set an egress policy: no network of
// its own, only the allowed hosts, through the plugin's proxy.
type Egress struct {
	// Hosts is the allow list as the model should read it; "" when nothing is allowed.
	Hosts string
	// Offline says the proxy cannot run (the agent does not), so nothing is reachable.
	Offline bool
	// Ask says other hosts are put to the person (egress { ask }), when their client
	// answers questions.
	Ask bool
}

// offline reports whether the sandbox reaches no host at all.
func offline(networkMode string, e *Egress) bool {
	if e == nil {
		return networkMode == "none"
	}
	// No host allowed outright, but the person may be asked: hosts can still be reached.
	return e.Offline || (e.Hosts == "" && !e.Ask)
}

// networkText is the sentence on the sandbox's network.
func networkText(networkMode string, e *Egress) string {
	switch {
	case e == nil && networkMode != "none":
		return " It can reach the network; packages you install persist."
	case e == nil || e.Offline:
		return " It is offline: downloads and package installs fail, so use what is installed."
	case e.Hosts == "" && e.Ask:
		return " The operator allows no host outright, through the proxy its environment names (HTTP_PROXY): a connection to any host waits while the user is asked whether to allow it (if their client can be asked), else gets 403; packages you install persist."
	case e.Hosts == "":
		return " It has no network: the operator allows no host, so use what is installed."
	case e.Ask:
		return " It reaches these hosts, through the proxy its environment names (HTTP_PROXY): " + e.Hosts +
			". A connection to another host waits while the user is asked whether to allow it (if their client can be asked), else gets 403; packages you install persist."
	}
	return " It reaches only these hosts, through the proxy its environment names (HTTP_PROXY): " + e.Hosts +
		". Others get 403; packages you install persist."
}

// blockedNote is the line a result gets when the proxy refused hosts to its command;
// the hosts are normalized names or quoted text, never instructions.
func blockedNote(box Box, job string) string {
	if job == "" {
		return ""
	}
	list := box.Blocked(job)
	if len(list) == 0 {
		return ""
	}
	if e := box.Egress(); e != nil && e.Ask {
		return "\n[blocked: " + strings.Join(list, ", ") + blockedAskTail + " only while a call waits for the command (execute, job_output) and their client supports elicitation: run it again and wait for it to be asked, or ask the user to have the operator allow the host]"
	}
	return "\n[blocked: " + strings.Join(list, ", ") + blockedTail + " in execute's description are reachable]"
}

// The text that follows the hosts in a blocked note: on a site that asks, and on one
// that does not (refusedHosts finds the hosts by them).
const (
	blockedAskTail = "; the user is asked about other hosts"
	blockedTail    = "; only the hosts"
)

// downloadCommand matches commands that download: package installs and git's network
// commands.
var downloadCommand = regexp.MustCompile(`\b(apt(-get)?\s+(-\S+\s+)*(install|update|upgrade|source|download)|(pip3?|uv\s+pip|python3?\s+-m\s+pip)\s+(-\S+\s+)*(install|download)|(npm|pnpm|yarn|bun)\s+(install|i|add|ci)|npx|(gem|cargo|conda|mamba)\s+install|go\s+(get|install|mod\s+download)|git\s+(clone|fetch|pull|submodule)|apk\s+add|dnf\s+install|yum\s+install)\b`)

// fetchCommand matches curl and wget given a URL; fetchHost finds the hosts of a
// command's URLs.
var (
	fetchCommand = regexp.MustCompile(`\b(curl|wget)\s[^;&|\n]*\b(https?|ftp)://`)
	fetchHost    = regexp.MustCompile(`\b(?:https?|ftp)://([^/\s:'"?#]+|\[[^\]]*\])`)
)

// downloads reports whether a command downloads: a package install, git's network
// commands, or curl or wget fetching from a host other than the sandbox itself.
func downloads(command string) bool {
	if downloadCommand.MatchString(command) {
		return true
	}
	if !fetchCommand.MatchString(command) {
		return false
	}
	for _, m := range fetchHost.FindAllStringSubmatch(command, -1) {
		switch h := strings.ToLower(m[1]); {
		case h == "localhost", strings.HasPrefix(h, "127."), h == "[::1]", h == "0.0.0.0", strings.HasSuffix(h, ".localhost"):
		default:
			return true
		}
	}
	return false
}

// piped matches a pipe (not ||): the exit code is then the last command's, and a
// download that failed before it (curl ... | sh) may end in exit code 0.
var piped = regexp.MustCompile(`(^|[^|])\|([^|]|$)`)

// aptUpdate matches apt-get update, which ends in exit code 0 when it could fetch
// nothing (warnings only).
var aptUpdate = regexp.MustCompile(`\bapt(-get)?\s+(-\S+\s+)*update\b`)

// offlineNote is the line a result gets when a command that downloads failed, or still
// runs, or was piped into another (whose exit code hides the failure), or is apt-get
// update (which ends in exit code 0 having fetched nothing), in a sandbox
// that reaches no host: package managers retry for a long time before they fail, and
// their errors do not say that the sandbox is offline.
func offlineNote(box Box, networkMode, command string, res *boxapi.ExecResult) string {
	if res == nil || (!res.Running && res.ExitCode == 0 && !piped.MatchString(command) && !aptUpdate.MatchString(command)) || !downloads(command) || !offline(networkMode, box.Egress()) {
		return ""
	}
	if res.Running {
		return "\n[note: the sandbox is offline, so this download cannot succeed; stop it with job_kill and use what is installed]"
	}
	return "\n[note: the sandbox is offline, so downloads and package installs fail; use what is installed, or ask the operator for network access]"
}
