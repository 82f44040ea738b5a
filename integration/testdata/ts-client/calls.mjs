// Makes tool calls the way a model's client does, with the official TypeScript SDK and
// claude.ai's deadline (every request times out after 60 s; progress does not reset it).
// Usage: node calls.mjs <base-url> <api-key>  with the calls on stdin as JSON:
//   [{"tool": "execute", "args": {...}, "follow": true}, ...]
// An argument "$job" is replaced by the job_id of the latest result that had one. With
// "follow", a result that says running is followed with job_output until the job ends
// (at most 30 calls), each call recorded as a result of its own.
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
    for (let i = 0; i < (c.follow ? 30 : 1); i++) {
      const tool = i === 0 ? c.tool : "job_output";
      const given = i === 0 ? c.args || {} : { job_id: "$job" };
      const args = Object.fromEntries(Object.entries(given).map(([k, v]) => [k, v === "$job" ? job : v]));
      const t0 = Date.now();
      let r;
      try {
        r = await client.callTool({ name: tool, arguments: args }, undefined, opts);
      } catch (e) {
        out.results.push({ tool, ms: Date.now() - t0, error: String(e) });
        break;
      }
      const sc = r.structuredContent;
      if (sc && sc.job_id) job = sc.job_id;
      out.results.push({
        tool,
        ms: Date.now() - t0,
        isError: !!r.isError,
        text: (r.content || []).filter((x) => x.type === "text").map((x) => x.text).join("\n"),
        images: (r.content || []).filter((x) => x.type === "image").length,
        structured: sc,
      });
      if (!sc || !sc.running) break;
    }
  }
  await client.close();
  console.log(JSON.stringify(out));
} catch (e) {
  out.error = String(e?.stack || e);
  console.log(JSON.stringify(out));
  process.exit(1);
}
