// Prints what a model is told about the sandbox, as the official TypeScript SDK sees it:
// the server instructions and the execute tool's description, before and after the
// sandbox's installed tools are detected. Usage: node describe.mjs <base-url> <api-key>
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [base, apiKey] = process.argv.slice(2);
const out = {};
try {
  const connect = async () => {
    const client = new Client({ name: "describe", version: "1.0.0" });
    const transport = new StreamableHTTPClientTransport(new URL("/mcp", base), {
      requestInit: { headers: { Authorization: `Bearer ${apiKey}` } },
    });
    await client.connect(transport);
    return client;
  };
  let client = await connect();
  out.instructions = client.getInstructions() ?? "";
  const first = await client.listTools();
  out.executeFirst = first.tools.find((t) => t.name === "execute")?.description ?? "";
  // Detection starts with the site (which creates the sandbox for it).
  await client.callTool({ name: "execute", arguments: { command: "true" } });
  // Detection runs in the background once the server first describes the sandbox;
  // a later session sees its result.
  let later = "";
  for (let i = 0; i < 150 && !later.includes("Installed:"); i++) {
    await new Promise((r) => setTimeout(r, 200));
    const tools = await client.listTools();
    later = tools.tools.find((t) => t.name === "execute")?.description ?? "";
  }
  out.executeLater = later;
  await client.close();
  client = await connect();
  out.instructionsLater = client.getInstructions() ?? "";
  await client.close();
} catch (e) {
  out.error = String(e?.stack || e);
}
console.log(JSON.stringify(out));
