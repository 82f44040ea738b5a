// Makes tool calls with the official TypeScript SDK as a client that answers the
// server's questions (elicitation, form mode) as told, or declares no elicitation.
// Usage: node elicit.mjs <base-url> <api-key>  with on stdin JSON:
//   {"elicitation": true, "answers": [{"action": "accept", "decision": "allow_once"},
//    {"action": "decline"}, ...], "calls": [{"tool": "execute", "args": {...}}, ...]}
// Each question takes the next answer (decline when none is left); an answer with
// "detour": "n" first sends n requests of its own to the server (GET /healthz), which
// moves a round-robin balancer on by n before the answer goes. Prints one JSON
// object: the questions asked (message, requested schema, the request's id, when it
// was answered) and each call's duration, end, text and structured result.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [base, apiKey] = process.argv.slice(2);
const out = { questions: [], results: [] };
try {
  let input = "";
  for await (const chunk of process.stdin) input += chunk;
  const spec = JSON.parse(input);
  const answers = spec.answers || [];
  const transport = new StreamableHTTPClientTransport(new URL("/mcp", base), { requestInit: { headers: { Authorization: `Bearer ${apiKey}` } } });
  const capabilities = spec.elicitation ? { elicitation: { form: {} } } : {};
  const client = new Client({ name: "ts-elicit-e2e", version: "1.0.0" }, { capabilities });
  if (spec.elicitation) {
    client.setRequestHandler(ElicitRequestSchema, async (req, extra) => {
      const q = { message: req.params.message, schema: req.params.requestedSchema, id: extra.requestId };
      out.questions.push(q);
      const a = answers.shift() || { action: "decline" };
      for (let i = 0; i < Number(a.detour || 0); i++) await (await fetch(new URL("/healthz", base))).arrayBuffer();
      q.answeredAt = Date.now();
      if (a.action === "accept") return { action: "accept", content: { decision: a.decision } };
      return { action: a.action };
    });
  }
  await client.connect(transport);
  for (const c of spec.calls) {
    const t0 = Date.now();
    try {
      const r = await client.callTool({ name: c.tool, arguments: c.args || {} }, undefined, { timeout: 120_000 });
      out.results.push({
        tool: c.tool,
        ms: Date.now() - t0,
        end: Date.now(),
        isError: !!r.isError,
        text: (r.content || []).filter((x) => x.type === "text").map((x) => x.text).join("\n"),
        structured: r.structuredContent,
      });
    } catch (e) {
      out.results.push({ tool: c.tool, ms: Date.now() - t0, error: String(e) });
    }
  }
  await client.close();
  console.log(JSON.stringify(out));
} catch (e) {
  out.error = String(e?.stack || e);
  console.log(JSON.stringify(out));
  process.exit(1);
}
