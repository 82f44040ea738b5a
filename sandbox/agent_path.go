package sandbox

// agentEnv names the variable that gives the job runner the agent's binary (for the
// pseudo-terminal of a tty job); it is absent when no agent runs in the container.
const agentEnv = "MCP_SANDBOX_AGENT"

// agentBinary returns the path of the agent's binary in the container, or "" when the
// sandbox runs without its agent (one Docker exec per call).
func (s *agentLink) agentBinary() string {
	s.agentMu.Lock()
	defer s.agentMu.Unlock()
	return s.agentBin
}

func (s *agentLink) setAgentBinary(path string) {
	s.agentMu.Lock()
	s.agentBin = path
	s.agentMu.Unlock()
}
