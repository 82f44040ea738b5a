// Follows a long command the way a client with claude.ai's deadline must: every request
// times out after 60 s and progress does not reset that. Usage:
//   node jobs.mjs <base-url> <api-key> <command>
// Prints one JSON object: the concatenated output, the exit code, every call's duration.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [base, apiKey, command] = process.argv.slice(2);
const out = { calls: [], stdout: "", stderr: "" };
const opts = { timeout: 60_000, resetTimeoutOnProgress: false, onprogress: () => { out.progress = (out.progress || 0) + 1; } };
try {
  const transport = new StreamableHTTPClientTransport(new URL("/mcp", base), { requestInit: { headers: { Authorization: `Bearer ${apiKey}` } } });
  const client = new Client({ name: "ts-jobs-e2e", version: "1.0.0" });
  await client.connect(transport);
  let t0 = Date.now();
  let r = await client.callTool({ name: "execute", arguments: { command } }, undefined, opts);
  for (;;) {
    const sc = r.structuredContent;
    out.calls.push({ ms: Date.now() - t0, running: sc.running, bytes: sc.stdout.length, error: !!r.isError });
    out.stdout += sc.stdout;
    out.stderr += sc.stderr;
    if (!sc.running) {
      out.exit_code = sc.exit_code;
      out.text = r.content?.[0]?.text;
      break;
    }
    t0 = Date.now();
    r = await client.callTool({ name: "job_output", arguments: { job_id: sc.job_id } }, undefined, opts);
  }
  await client.close();
  console.log(JSON.stringify(out));
} catch (e) {
  out.error = String(e?.stack || e);
  console.log(JSON.stringify(out));
  process.exit(1);
}
