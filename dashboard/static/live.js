// Live refresh: re-fetch the page every data-refresh seconds and swap its
// <main>. The page works the same without it; nothing here runs inline.
(function () {
  "use strict";
  var secs = parseInt(document.body.getAttribute("data-refresh"), 10);
  if (!(secs > 0) || !window.fetch || !window.DOMParser) { return; }
  var badge = document.getElementById("live");
  function busy() {
    // Never replace the page under an operator who is typing or has a
    // details panel open.
    var a = document.activeElement;
    if (a && (a.tagName === "INPUT" || a.tagName === "TEXTAREA" || a.tagName === "SELECT")) { return true; }
    return document.querySelector("main details[open]") !== null;
  }
  function tick() {
    if (document.hidden || busy()) { return schedule(); }
    fetch(window.location.href, { credentials: "same-origin", headers: { "X-Rheo-Refresh": "1" } })
      .then(function (r) {
        if (!r.ok) { throw new Error("HTTP " + r.status); }
        return r.text();
      })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("main");
        var main = document.getElementById("main");
        if (fresh && main) { main.replaceWith(document.importNode(fresh, true)); }
        if (badge) { badge.className = "live"; badge.title = "Refreshed " + new Date().toLocaleTimeString(); }
      })
      .catch(function (e) {
        if (badge) { badge.className = "live stale"; badge.title = "Refresh failed: " + e.message; }
      })
      .then(schedule);
  }
  function schedule() { window.setTimeout(tick, secs * 1000); }
  schedule();
})();
