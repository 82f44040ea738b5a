// Drives the MCP server with the official TypeScript SDK, the client most MCP hosts
// are built on. Usage:
//   node run.mjs <base-url> bearer <api-key>   the API key as bearer token
//   node run.mjs <base-url> oauth  <api-key>   the SDK's own OAuth client: discovery,
//                                              registration, PKCE, sign-in form, tokens
// Prints one JSON object with what it saw; the Go test asserts on it.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";

const [base, mode, apiKey] = process.argv.slice(2);
const mcpURL = new URL("/mcp", base);
const out = { mode, steps: [] };

// signIn plays the person at the sign-in page: it loads the authorization URL, fills
// in the API key with the form's hidden fields and returns the code from the redirect.
async function signIn(authURL) {
  const page = await fetch(authURL, { redirect: "manual" });
  const html = await page.text();
  if (page.status !== 200) throw new Error(`sign-in page answered ${page.status}: ${html.slice(0, 200)}`);
  const form = html.match(/<form[^>]*action="([^"]*)"[^>]*>([\s\S]*?)<\/form>/i);
  if (!form) throw new Error("no form on the sign-in page");
  const action = new URL(form[1].replace(/&amp;/g, "&") || authURL.toString(), authURL);
  const fields = new URLSearchParams();
  for (const m of form[2].matchAll(/<input[^>]*>/gi)) {
    const tag = m[0];
    const name = tag.match(/name="([^"]*)"/i)?.[1];
    if (!name) continue;
    const type = (tag.match(/type="([^"]*)"/i)?.[1] || "text").toLowerCase();
    const value = (tag.match(/value="([^"]*)"/i)?.[1] || "").replace(/&#(\d+);/g, (_, n) => String.fromCharCode(Number(n))).replace(/&quot;/g, '"').replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&amp;/g, "&");
    fields.set(name, type === "password" ? apiKey : value);
  }
  const res = await fetch(action, { method: "POST", body: fields, redirect: "manual", headers: { "content-type": "application/x-www-form-urlencoded" } });
  const loc = res.headers.get("location");
  if (!loc) throw new Error(`sign-in did not redirect: ${res.status} ${(await res.text()).slice(0, 300)}`);
  const cb = new URL(loc);
  out.steps.push({ signIn: { status: res.status, iss: cb.searchParams.get("iss"), state: !!cb.searchParams.get("state") } });
  return cb.searchParams.get("code");
}

class MemoryProvider {
  constructor() { this._tokens = undefined; this._client = undefined; this._verifier = ""; this.pendingAuth = undefined; }
  get redirectUrl() { return "http://127.0.0.1:33418/callback"; }
  get clientMetadata() {
    return { client_name: "TypeScript SDK e2e", redirect_uris: [this.redirectUrl], grant_types: ["authorization_code", "refresh_token"], response_types: ["code"], token_endpoint_auth_method: "none" };
  }
  state() { return "st-" + Math.random().toString(36).slice(2); }
  clientInformation() { return this._client; }
  saveClientInformation(c) { this._client = c; out.steps.push({ registered: !!c.client_id }); }
  tokens() { return this._tokens; }
  saveTokens(t) { this._tokens = t; out.steps.push({ tokens: { access: !!t.access_token, refresh: !!t.refresh_token, expires_in: t.expires_in } }); }
  redirectToAuthorization(url) { this.pendingAuth = url; }
  saveCodeVerifier(v) { this._verifier = v; }
  codeVerifier() { return this._verifier; }
}

async function connect() {
  if (mode === "bearer") {
    const transport = new StreamableHTTPClientTransport(mcpURL, { requestInit: { headers: { Authorization: `Bearer ${apiKey}` } } });
    const client = new Client({ name: "ts-sdk-e2e", version: "1.0.0" });
    await client.connect(transport);
    return client;
  }
  const provider = new MemoryProvider();
  let transport = new StreamableHTTPClientTransport(mcpURL, { authProvider: provider });
  let client = new Client({ name: "ts-sdk-e2e", version: "1.0.0" });
  try {
    await client.connect(transport);
    throw new Error("connected without signing in");
  } catch (e) {
    if (!(e instanceof UnauthorizedError)) throw e;
  }
  out.steps.push({ unauthorizedFirst: true, authorizeURL: provider.pendingAuth?.origin + provider.pendingAuth?.pathname });
  const code = await signIn(provider.pendingAuth);
  await transport.finishAuth(code);
  transport = new StreamableHTTPClientTransport(mcpURL, { authProvider: provider });
  client = new Client({ name: "ts-sdk-e2e", version: "1.0.0" });
  await client.connect(transport);
  out.provider = provider;
  return client;
}

try {
  const client = await connect();
  out.server = client.getServerVersion();
  out.tools = (await client.listTools()).tools.map((t) => t.name);
  const progress = [];
  const r = await client.callTool(
    { name: "execute", arguments: { command: "for i in 1 2 3; do echo step-$i; sleep 1; done; echo bad >&2; exit 4" } },
    undefined,
    { onprogress: (p) => progress.push(p.message || ""), resetTimeoutOnProgress: true },
  );
  out.execute = r.structuredContent;
  out.executeText = r.content?.[0]?.text;
  out.progress = progress;
  await client.callTool({ name: "execute", arguments: { command: "printf 'shared bytes' > /sandbox/ts.txt" } });
  const s = await client.callTool({ name: "share_file", arguments: { path: "/sandbox/ts.txt" } });
  out.share = s.structuredContent;
  out.download = await (await fetch(s.structuredContent.url)).text();
  if (out.provider) {
    // Refresh: the SDK refreshes when told the access token is no longer good.
    const p = out.provider;
    delete out.provider;
    out.refreshTokenBefore = p._tokens.refresh_token.slice(0, 6);
  }
  await client.close();
  console.log(JSON.stringify(out));
} catch (e) {
  delete out.provider;
  out.error = String(e?.stack || e);
  console.log(JSON.stringify(out));
  process.exit(1);
}
