// A conversation that renders MCP Apps, as hosts do with the reference SDK: the
// AppBridge of @modelcontextprotocol/ext-apps talks to the app in a sandboxed iframe
// (scripts only: an opaque origin) under the CSP the resource declared. The Go test
// reads the tool result and the app's resource through a real Caddy and hands them to
// showApp; the bridge sends the tool input and result once the app initialized.
import { AppBridge, PostMessageTransport } from "@modelcontextprotocol/ext-apps/app-bridge";

// cspOf is the policy a host builds from _meta.ui.csp: nothing but the inline app, the
// origins it may connect to, load images and media from (resourceDomains), and frame.
function cspOf(csp) {
  const c = csp || {};
  const list = (l) => (l && l.length ? l.join(" ") : "'none'");
  const res = (c.resourceDomains || []).join(" ");
  return [
    "default-src 'none'",
    "script-src 'unsafe-inline'",
    "style-src 'unsafe-inline'",
    ("img-src data: " + res).trim(),
    ("media-src data: " + res).trim(),
    "connect-src " + list(c.connectDomains),
    "frame-src " + list(c.frameDomains),
  ].join("; ");
}

window.host = { initialized: false, appInfo: null, heights: [], links: [], errors: [] };

window.showApp = async ({ html, meta, input, result }) => {
  const iframe = document.createElement("iframe");
  iframe.id = "app";
  iframe.setAttribute("sandbox", "allow-scripts allow-forms");
  document.getElementById("conversation").append(iframe);
  const bridge = new AppBridge(null, { name: "apps-host-test", version: "1" }, { openLinks: {}, logging: {} });
  bridge.oninitialized = () => {
    host.initialized = true;
    host.appInfo = bridge.getAppVersion();
    bridge.sendToolInput({ arguments: input });
    bridge.sendToolResult(result);
  };
  bridge.onsizechange = ({ height }) => {
    if (height) {
      iframe.style.height = height + "px";
      host.heights.push(height);
    }
  };
  bridge.onopenlink = async ({ url }) => {
    host.links.push(url);
    return {};
  };
  bridge.onerror = (e) => host.errors.push(String(e));
  await bridge.connect(new PostMessageTransport(iframe.contentWindow, iframe.contentWindow));
  const policy = `<meta http-equiv="Content-Security-Policy" content="${cspOf(meta && meta.ui && meta.ui.csp)}">`;
  iframe.srcdoc = html.replace("<head>", "<head>" + policy);
  host.policy = cspOf(meta && meta.ui && meta.ui.csp);
};
