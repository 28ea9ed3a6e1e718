// Tether console: the event stream the console's tabs share (a
// SharedWorker, started by console.js). An open stream holds one of the
// browser's connections to the server, six at most per host over
// HTTP/1.1: here every tab following an environment, as one user, shares
// one stream, however many tabs are open.
//
// A page sends {op: "follow", url, who, kinds} (the stream's URL, the
// user it is of and the event kinds it wants) and {op: "leave"} (on
// pagehide, or before it follows another); it gets {type: "state", open}
// when the stream opens or drops (the browser reconnects it), and
// {type: "event", kind} for each event of the kinds its pages asked for.
// The stream closes when its last page leaves.
"use strict";

var streams = new Map(); // key (who, url) -> {es, ports: Set, kinds: Set, open}
var following = new Map(); // port -> key

function leave(port) {
  var key = following.get(port);
  if (key === undefined) { return; }
  following.delete(port);
  var s = streams.get(key);
  if (!s) { return; }
  s.ports.delete(port);
  if (s.ports.size === 0) {
    s.es.close();
    streams.delete(key);
  }
}

function tell(s, msg) {
  s.ports.forEach(function (p) { p.postMessage(msg); });
}

function follow(port, m) {
  leave(port);
  if (typeof m.url !== "string" || m.url.indexOf("/api/v1/events?") !== 0) { return; }
  var key = String(m.who) + "\n" + m.url;
  var s = streams.get(key);
  if (!s) {
    s = { es: new EventSource(m.url), ports: new Set(), kinds: new Set(), open: false };
    s.es.onopen = function () { s.open = true; tell(s, { type: "state", open: true }); };
    s.es.onerror = function () { s.open = false; tell(s, { type: "state", open: false }); };
    streams.set(key, s);
  }
  (Array.isArray(m.kinds) ? m.kinds : []).forEach(function (k) {
    if (s.kinds.has(k)) { return; }
    s.kinds.add(k);
    s.es.addEventListener(k, function () { tell(s, { type: "event", kind: k }); });
  });
  s.ports.add(port);
  following.set(port, key);
  if (s.open) { port.postMessage({ type: "state", open: true }); }
}

self.onconnect = function (e) {
  var port = e.ports[0];
  port.onmessage = function (m) {
    var d = m.data || {};
    if (d.op === "follow") { follow(port, d); }
    if (d.op === "leave") { leave(port); }
  };
  // Where the browser says so, a tab that went without leaving (it
  // crashed) lets go too.
  port.addEventListener("close", function () { leave(port); });
};
