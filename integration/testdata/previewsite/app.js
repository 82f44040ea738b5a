document.getElementById('origin').textContent = location.origin;
const done = new Set();
function ok(id, text) {
  const e = document.getElementById(id);
  e.textContent = text;
  e.className = 'ok';
  done.add(id);
  if (done.size === 5) document.getElementById('status').textContent = 'all good';
}
ok('js', 'ran');
if (getComputedStyle(document.body).backgroundColor === 'rgb(244, 248, 255)') ok('css', 'loaded');
const img = document.getElementById('logo');
const imgDone = () => { if (img.naturalWidth > 0) ok('img', 'loaded'); };
if (img.complete) imgDone(); else img.addEventListener('load', imgDone);

const nonce = Math.random().toString(36).slice(2);
const ws = new WebSocket((location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/ws');
let rounds = 0;
ws.onopen = () => ws.send('ping ' + nonce + ' ' + rounds);
ws.onmessage = (e) => {
  if (e.data !== 'ping ' + nonce + ' ' + rounds) return;
  rounds++;
  // Two round trips on the same socket: the connection is held, not one-shot.
  if (rounds < 2) { ws.send('ping ' + nonce + ' ' + rounds); return; }
  ok('ws', 'echo round trip ok (' + rounds + ' messages, socket open)');
};
window.wsState = () => ws.readyState;

const es = new EventSource('/sse?count=3');
let ticks = 0;
es.onmessage = (e) => {
  ticks++;
  if (ticks === 3) { es.close(); ok('sse', 'received ' + e.data); }
};
