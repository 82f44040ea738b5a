package agentbin

// Rebuilds sandbox-agent-linux-*.gz and manifest.json from cmd/sandbox-agent; run it
// after changing the agent and commit the result (TestBinariesMatchSource checks it).
//go:generate go run ./gen -o .
