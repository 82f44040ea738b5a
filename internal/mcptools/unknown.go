package mcptools

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// A call of a tool this server does not have gets a tool error that lists the tools,
// rather than mcp-go's JSON-RPC error ("tool 'x' not found"), which names none and
// which some clients hide from the model. mcp-go has no hook for it, so a hook before
// every call turns such a call into one of a tool kept out of every listing,
// unknownTool, that answers with the list.

// unknownTool is the hidden tool that answers calls of tools that do not exist.
const unknownTool = "_unknown_tool"

// addUnknownTool registers unknownTool and the hook that sends unknown calls to it.
func (s *Tools) addUnknownTool(m *server.MCPServer, hooks *server.Hooks) {
	m.AddTool(mcp.NewTool(unknownTool, mcp.WithDescription("Answers calls of tools that do not exist.")),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			name, _ := req.GetArguments()["name"].(string)
			text := fmt.Sprintf("There is no tool %q on this server. Its tools are: %s. To run a program or command in the sandbox, use execute.",
				name, strings.Join(s.toolNames(), ", "))
			if s.opts.NoCheckpoints != "" && slices.Contains([]string{"checkpoint", "checkpoint_list", "restore"}, name) {
				text += " " + s.opts.NoCheckpoints
			}
			return mcp.NewToolResultError(text), nil
		})
	hooks.AddBeforeCallTool(func(ctx context.Context, _ any, req *mcp.CallToolRequest) {
		if s.server == nil || s.server.GetTool(req.Params.Name) != nil {
			return
		}
		req.Params.Name, req.Params.Arguments = unknownTool, map[string]any{"name": req.Params.Name}
	})
}

// toolNames are the names of the tools listed, sorted.
func (s *Tools) toolNames() []string {
	var names []string
	for name := range s.server.ListTools() {
		if name != unknownTool {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// hideUnknownTool keeps unknownTool out of tools/list. mcp-go also runs the filters
// when a tool is called, with that tool alone: then it stays, so that its calls pass.
func hideUnknownTool(tools []mcp.Tool) []mcp.Tool {
	if len(tools) <= 1 {
		return tools
	}
	return slices.DeleteFunc(tools, func(t mcp.Tool) bool { return t.Name == unknownTool })
}
