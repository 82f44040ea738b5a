package mcptools

import "strings"

// Egress is a sandbox's way out when the operator set an egress policy: no network of
// its own, only the allowed hosts, through the plugin's proxy.
type Egress struct {
	// Hosts is the allow list as the model should read it; "" when nothing is allowed.
	Hosts string
	// Offline says the proxy cannot run (the agent does not), so nothing is reachable.
	Offline bool
}

// networkText is the sentence on the sandbox's network.
func networkText(networkMode string, e *Egress) string {
	switch {
	case e == nil && networkMode != "none":
		return " It can reach the network; packages you install persist."
	case e == nil || e.Offline:
		return " It is offline: downloads and package installs (apt-get, pip, npm) fail, so use what is installed."
	case e.Hosts == "":
		return " It has no network: the operator allows no host, so use what is installed."
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
	return "\n[blocked: " + strings.Join(list, ", ") + "; only the hosts in execute's description are reachable]"
}
