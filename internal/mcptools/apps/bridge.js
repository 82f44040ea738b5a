// The host bridge of MCP Apps, as small as this view needs: JSON-RPC 2.0 over
// postMessage with the parent window (ui/initialize, then the tool result).
const pending = new Map();
let nextId = 1;
function send(m) { window.parent.postMessage(Object.assign({ jsonrpc: "2.0" }, m), "*"); }
function request(method, params) {
  const id = nextId++;
  send({ id, method, params });
  return new Promise((res, rej) => pending.set(id, { res, rej }));
}
window.addEventListener("message", (e) => {
  const m = e.data;
  if (e.source !== window.parent || !m || m.jsonrpc !== "2.0") return;
  if (m.method === undefined) {
    const p = pending.get(m.id);
    if (p) { pending.delete(m.id); m.error ? p.rej(new Error(m.error.message)) : p.res(m.result); }
    return;
  }
  if (m.method === "ui/notifications/tool-result") { onResult(m.params); return; }
  if (m.id === undefined) return;
  if (m.method === "ping" || m.method === "ui/resource-teardown") send({ id: m.id, result: {} });
  else send({ id: m.id, error: { code: -32601, message: "Method not found" } });
});
function resized() {
  const h = Math.ceil(document.documentElement.getBoundingClientRect().height);
  send({ method: "ui/notifications/size-changed", params: { width: Math.ceil(window.innerWidth), height: h } });
}
