// Runs execute as an MCP task (protocol 2025-11-25) with the TypeScript SDK's
// experimental tasks client. Usage: node tasks.mjs <base-url> <api-key>
// Prints one JSON object with what it saw; the Go test asserts on it.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [base, apiKey] = process.argv.slice(2);
const out = { messages: [] };
try {
  const transport = new StreamableHTTPClientTransport(new URL("/mcp", base), { requestInit: { headers: { Authorization: `Bearer ${apiKey}` } } });
  const client = new Client({ name: "ts-tasks-e2e", version: "1.0.0" }, { capabilities: {} });
  await client.connect(transport);
  out.tools = (await client.listTools()).tools.map((t) => ({ name: t.name, execution: t.execution }));
  const tasks = client.experimental.tasks;
  const stream = tasks.callToolStream(
    { name: "execute", arguments: { command: "for i in 1 2 3; do echo t-$i; sleep 1; done; exit 2" } },
    undefined,
    { task: { ttl: 600000 }, timeout: 60000 },
  );
  for await (const m of stream) {
    out.messages.push(m.type);
    if (m.type === "taskCreated") out.taskId = m.task.taskId;
    if (m.type === "result") out.result = m.result.structuredContent;
    if (m.type === "error") out.streamError = String(m.error);
  }
  // A second task, cancelled while it runs.
  const stream2 = tasks.callToolStream({ name: "execute", arguments: { command: "sleep 4545" } }, undefined, { task: { ttl: 600000 } });
  for await (const m of stream2) {
    if (m.type === "taskCreated") {
      out.cancelId = m.task.taskId;
      await new Promise((r) => setTimeout(r, 1500));
      out.listed = (await tasks.listTasks()).tasks.map((t) => t.taskId + ":" + t.status);
      await tasks.cancelTask(m.task.taskId);
      out.afterCancel = (await tasks.getTask(m.task.taskId)).status;
      break;
    }
  }
  await client.close();
  console.log(JSON.stringify(out));
} catch (e) {
  out.error = String(e?.stack || e);
  console.log(JSON.stringify(out));
  process.exit(1);
}
