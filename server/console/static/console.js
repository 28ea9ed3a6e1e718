// Tether console: live updates. A page that follows its environment
// (body[data-live-env]) opens the API's event stream and, when an event
// touches what it shows, fetches its changing part again (?fragment=1)
// and swaps it in, keeping the boxes the user checked. No reload.
(function () {
  "use strict";
  var env = document.body.getAttribute("data-live-env");
  if (!env || !window.EventSource) { return; }
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

  var kinds = ["compliance.drift", "resource.result", "deploy.done", "agent.discovered", "agent.online", "agent.offline",
    "agent.changed", "security.alert", "env.halted", "compile.finished", "compile.alert", "compile.recovered", "release.started",
    "release.progress", "release.done"];
  var es = new EventSource("/api/v1/events?env=" + encodeURIComponent(env));
  kinds.forEach(function (k) { es.addEventListener(k, soon); });
  es.onopen = function () { if (state) { state.textContent = "Live"; } document.body.setAttribute("data-live", "open"); };
  es.onerror = function () { if (state) { state.textContent = "Reconnecting"; } document.body.setAttribute("data-live", "closed"); };
})();
