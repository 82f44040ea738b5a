// Makes tool calls the way a model's client does, with the official TypeScript SDK and
// claude.ai's deadline (every request times out after 60 s; progress does not reset it).
// Usage: node calls.mjs <base-url> <api-key>  with the calls on stdin as JSON:
//   [{"tool": "execute", "args": {...}}, ...]
// An argument "$job" is replaced by the job_id of the latest result that had one.
// Prints one JSON object: the instructions, the tools (name, title, description), and
// each call's duration, error flag, text and structured result.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [base, apiKey] = process.argv.slice(2);
const out = { results: [] };
const opts = { timeout: 60_000, resetTimeoutOnProgress: false };
try {
  let input = "";
  for await (const chunk of process.stdin) input += chunk;
  const calls = JSON.parse(input);
  const transport = new StreamableHTTPClientTransport(new URL("/mcp", base), { requestInit: { headers: { Authorization: `Bearer ${apiKey}` } } });
  const client = new Client({ name: "ts-calls-e2e", version: "1.0.0" });
  await client.connect(transport);
  out.instructions = client.getInstructions();
  const listed = await client.listTools();
  out.tools = listed.tools.map((t) => ({ name: t.name, title: t.title, description: t.description }));
  let job = "";
  for (const c of calls) {
    const args = Object.fromEntries(Object.entries(c.args || {}).map(([k, v]) => [k, v === "$job" ? job : v]));
    const t0 = Date.now();
    let r;
    try {
      r = await client.callTool({ name: c.tool, arguments: args }, undefined, opts);
    } catch (e) {
      out.results.push({ ms: Date.now() - t0, error: String(e) });
      continue;
    }
    const sc = r.structuredContent;
    if (sc && sc.job_id) job = sc.job_id;
    out.results.push({
      ms: Date.now() - t0,
      isError: !!r.isError,
      text: (r.content || []).filter((x) => x.type === "text").map((x) => x.text).join("\n"),
      structured: sc,
    });
  }
  await client.close();
  console.log(JSON.stringify(out));
} catch (e) {
  out.error = String(e?.stack || e);
  console.log(JSON.stringify(out));
  process.exit(1);
}
