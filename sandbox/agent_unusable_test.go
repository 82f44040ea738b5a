package sandbox

import "testing"

// Only the engine's message that the binary itself cannot be executed (missing, not
// permitted, not a program for the machine), naming it, sends the agent to a copy.
func TestBinaryUnusable(t *testing.T) {
	const p = "/run/mcp-sandbox-agent/sandbox-agent-7342495f70e8"
	for msg, want := range map[string]bool{
		`OCI runtime exec failed: exec failed: unable to start container process: exec: "` + p + `": stat ` + p + `: no such file or directory: unknown`: true,
		`OCI runtime exec failed: exec failed: unable to start container process: eaccess ` + p + `: permission denied: unknown`:                         true,
		`OCI runtime exec failed: exec failed: container_linux.go:380: starting container process caused: exec: "` + p + `": permission denied`:          true,
		`crun: ` + p + `: Exec format error`: true,
		`OCI runtime exec failed: exec failed: unable to start container process: read init-p: connection reset by peer: unknown`:           false,
		`runc exec: fork/exec /proc/self/exe: resource temporarily unavailable`:                                                             false,
		`OCI runtime exec failed: exec failed: unable to start container process: exec: "/bin/sh": stat /bin/sh: no such file or directory`: false,
		``: false,
	} {
		if got := binaryUnusable(msg, p); got != want {
			t.Errorf("binaryUnusable(%q) = %v, want %v", msg, got, want)
		}
	}
}
