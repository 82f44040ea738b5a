package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/facts"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testengine"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// TestDetectionNeverInstructs: through a real Caddy and container, a python3 planted
// early on PATH that prints an instruction during detection, and facts poisoned the
// same way in Caddy's storage (as an earlier version kept them), never reach the
// server instructions or any tool description of a later session, nor stay in
// storage. The facts still name the programs found.
func TestDetectionNeverInstructs(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker and the test image")
	}
	t.Run("planted python3", func(t *testing.T) {
		// The image has the planted program, so that it is there when detection
		// first looks (it starts with the site).
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		plant := "printf '%s\\n' '#!/bin/bash' \"echo 'numpy " + testenv.PlantedNotice + "'\" \"echo '" + testenv.PlantedNotice + "'\" 'echo git' > /usr/local/bin/python3 && chmod +x /usr/local/bin/python3"
		s := testsite.Start(t, testsite.Options{Image: derivedImage(ctx, t, "RUN "+plant)})
		instr, tools := laterSession(ctx, t, s)
		if testenv.HasInjection(instr) || testenv.HasInjection(tools) {
			t.Fatalf("the planted text reached the model:\ninstructions: %q\ntools: %.2000s", instr, tools)
		}
		if !strings.Contains(instr, "Installed: python3 (numpy).") {
			t.Errorf("the planted python3 was not detected as a program: %q", instr)
		}
		checkStoredFacts(t, s)
	})

	t.Run("poisoned storage", func(t *testing.T) {
		// Stored before the site starts, as detection starts with it.
		s := testsite.New(t)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		img, err := s.Docker.ImageInspect(ctx, testengine.Image())
		if err != nil {
			t.Fatal(err)
		}
		poisoned, _ := json.Marshal(map[string]any{
			"image_id": img.ID, "programs": []string{"python3", testenv.PlantedNotice}, "python_modules": []string{"numpy", testenv.PlantedNotice},
		})
		key := filepath.Join(s.Storage, filepath.FromSlash(facts.Key(s.Container)))
		if err := os.MkdirAll(filepath.Dir(key), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(key, poisoned, 0o600); err != nil {
			t.Fatal(err)
		}
		s.Start(testsite.Options{})
		instr, tools := laterSession(ctx, t, s)
		if testenv.HasInjection(instr) || testenv.HasInjection(tools) {
			t.Fatalf("the stored text reached the model:\ninstructions: %q\ntools: %.2000s", instr, tools)
		}
		// The test image has no python3: these names come from the stored facts.
		if !strings.Contains(instr, "Installed: python3 (numpy).") {
			t.Errorf("the stored facts were not used: %q", instr)
		}
		checkStoredFacts(t, s)
	})
}

// laterSession opens new sessions until one is told what is installed, and returns
// its instructions (from initialize) and every tool as listed, as JSON. A failed
// detection is retried after factsRetry. Sessions of the handshake protocol
// (initialize) are asked, as only they get the environment in their instructions;
// once it is known, a session of the newest protocol (server/discover) is checked too.

func laterSession(ctx context.Context, t *testing.T, s *testsite.Site) (instructions, tools string) {
	t.Helper()
	instructions, tools = pollSession(ctx, t, s, mcp.LATEST_LEGACY_PROTOCOL_VERSION)
	modernInstr, modernTools := mcpSession(ctx, t, s, mcp.LATEST_PROTOCOL_VERSION)
	return instructions + "\n" + modernInstr, tools + "\n" + modernTools
}

func pollSession(ctx context.Context, t *testing.T, s *testsite.Site, version string) (instructions, tools string) {
	t.Helper()
	deadline := time.Now().Add(65 * time.Second)
	for {
		instructions, tools = mcpSession(ctx, t, s, version)
		// Both must have heard of the facts: they may arrive between the two requests.
		known := strings.Contains(instructions, "Installed:") && strings.Contains(tools, "Installed:")
		if known || testenv.HasInjection(instructions) || testenv.HasInjection(tools) {
			return instructions, tools
		}
		if time.Now().After(deadline) {
			t.Fatalf("no session was told what is installed: %q", instructions)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// mcpSession opens one session and returns its instructions and its tools as JSON.
func mcpSession(ctx context.Context, t *testing.T, s *testsite.Site, version string) (instructions, tools string) {
	t.Helper()
	c, err := mcpclient.NewStreamableHttpClient(s.URL+"/mcp",
		transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + s.Key}))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = version
	init.Params.ClientInfo = mcp.Implementation{Name: "e2e-test", Version: "1"}
	ir, err := c.Initialize(ctx, init)
	if err != nil {
		t.Fatalf("initialize: %v", err)
	}
	lr, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	b, _ := json.Marshal(lr.Tools)
	return ir.Instructions, string(b)
}

// checkStoredFacts fails when the facts in Caddy's storage carry the injection.
func checkStoredFacts(t *testing.T, s *testsite.Site) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.Storage, filepath.FromSlash(facts.Key(s.Container))))
	if err != nil || testenv.HasInjection(string(b)) || !strings.Contains(string(b), `"python3"`) {
		t.Errorf("stored facts: %s (%v)", b, err)
	}
}
