// Tether console: live updates. A page that follows its environment
// (body[data-live-env]) listens to the API's event stream and, when an event
// touches what it shows, fetches its changing part again (?fragment=1)
// and swaps it in, keeping the boxes the user checked. No reload.
//
// An open stream holds one of the browser's connections to the server, and
// over HTTP/1.1 a browser opens at most six per host: a seventh request
// waits for one of them. So a page holds a stream only while it is shown:
//
//   - The tabs of the console share one stream per environment (and user):
//     a SharedWorker (stream-worker.js) holds it and passes its events on.
//     Where there is no SharedWorker, or it fails, the page opens its own.
//   - A page lets go of it on pagehide. The browser's back-forward cache
//     keeps a page left, with its open requests, to show it again at once
//     on Back: its stream would go on holding a connection for a minute or
//     more (Chromium drops such a page after about one), and six pages left
//     in one tab stalled the seventh. A page shown again from that cache
//     (pageshow, persisted) follows the stream again and refreshes, since
//     events may have passed while it was hidden.
(function () {
  "use strict";
  var env = document.body.getAttribute("data-live-env");
  if (!env) { return; }
  var who = document.body.getAttribute("data-live-who") || "";
  var region = document.getElementById("live");
  var state = document.getElementById("live-state");
  var timer = null, busy = false, again = false;

  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    var url = new URL(window.location.href);
    url.searchParams.set("fragment", "1");
    fetch(url.toString(), { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        var checked = {};
        region.querySelectorAll("input[type=checkbox]:checked").forEach(function (b) { checked[b.name + "=" + b.value] = true; });
        var focused = document.activeElement && document.activeElement.id;
        region.innerHTML = html;
        region.querySelectorAll("input[type=checkbox]").forEach(function (b) { if (checked[b.name + "=" + b.value]) { b.checked = true; } });
        if (focused) { var f = document.getElementById(focused); if (f) { f.focus(); } }
        document.body.setAttribute("data-refreshed", String(Date.now()));
      })
      .catch(function () {})
      .then(function () {
        busy = false;
        if (again) { again = false; soon(); }
      });
  }

  // soon gathers a burst of events into one refresh.
  function soon() {
    if (timer) { return; }
    timer = setTimeout(function () { timer = null; refresh(); }, 150);
  }

  // heard counts the events of the page's kinds (data-live-events) and
  // refreshes soon.
  var heardCount = 0;
  function heard() {
    heardCount++;
    document.body.setAttribute("data-live-events", String(heardCount));
    soon();
  }

  function live(open) {
    if (state) { state.textContent = open ? "Live" : "Reconnecting"; }
    document.body.setAttribute("data-live", open ? "open" : "closed");
  }

  var kinds = ["compliance.drift", "resource.result", "deploy.done", "agent.discovered", "agent.online", "agent.offline",
    "agent.changed", "security.alert", "env.halted", "compile.finished", "compile.alert", "compile.recovered", "release.started",
    "release.progress", "release.done", "host.state", "instance.changed"];
  var streamURL = "/api/v1/events?env=" + encodeURIComponent(env);

  // ownStream is the page's own stream (no SharedWorker).
  function ownStream() {
    var es = null;
    return {
      how: "page",
      follow: function () {
        if (es || !window.EventSource) { return; }
        es = new EventSource(streamURL);
        kinds.forEach(function (k) { es.addEventListener(k, heard); });
        es.onopen = function () { live(true); };
        es.onerror = function () { live(false); };
      },
      leave: function () {
        if (es) { es.close(); es = null; }
      }
    };
  }

  // sharedStream is the stream the tabs share through stream-worker.js;
  // null without SharedWorker. When the worker fails, fallBack gets the
  // page its own stream. Once left, it is done with: a page shown again
  // connects anew.
  function sharedStream(fallBack) {
    if (!window.SharedWorker) { return null; }
    var w;
    try {
      // The name carries the version of the messages below: a tab of
      // an older console keeps its worker to itself.
      w = new SharedWorker("/static/stream-worker.js", { name: "tether-events-1" });
    } catch (e) {
      return null;
    }
    var following = false, done = false;
    w.onerror = function () {
      if (done) { return; }
      done = true;
      fallBack(following);
    };
    w.port.onmessage = function (m) {
      var d = m.data || {};
      if (d.type === "state") { live(d.open); }
      if (d.type === "event") { heard(); }
    };
    return {
      how: "shared",
      follow: function () {
        following = true;
        if (!done) { w.port.postMessage({ op: "follow", url: streamURL, who: who, kinds: kinds }); }
      },
      leave: function () {
        following = false;
        if (done) { return; }
        done = true;
        w.port.postMessage({ op: "leave" });
        w.port.close();
      }
    };
  }

  // connect has the page follow a stream: the tabs' shared one, else its
  // own.
  var stream = null;
  function connect() {
    var s = sharedStream(function (wasFollowing) {
      if (stream !== s) { return; }
      stream = ownStream();
      document.body.setAttribute("data-live-stream", stream.how);
      if (wasFollowing) { stream.follow(); }
    }) || ownStream();
    stream = s;
    document.body.setAttribute("data-live-stream", s.how);
    s.follow();
  }
  connect();

  // A page shown again from the back-forward cache connects anew (the
  // worker it left may be gone) and refreshes.
  window.addEventListener("pagehide", function () { stream.leave(); });
  window.addEventListener("pageshow", function (e) {
    if (!e.persisted) { return; }
    live(false);
    connect();
    refresh();
  });
})();
