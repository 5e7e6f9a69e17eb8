// KubeNest portal: refresh a cluster's status while it provisions, confirm deletes, and show
// that a form is being sent. No framework; the server renders every piece of HTML.
(function () {
  "use strict";

  function poll() {
    var el = document.getElementById("status");
    if (!el) return;
    var wait = parseInt(el.getAttribute("data-poll"), 10) || 2000;
    setTimeout(function () {
      fetch(el.getAttribute("data-src"), { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
        .then(function (r) {
          if (r.status === 401) { window.location.reload(); return null; }
          if (!r.ok) throw new Error("status " + r.status);
          return r.text();
        })
        .then(function (html) {
          if (html === null) return;
          var cur = document.getElementById("status");
          var tmp = document.createElement("div");
          tmp.innerHTML = html.trim();
          if (cur && tmp.firstElementChild) cur.replaceWith(tmp.firstElementChild);
          poll();
        })
        .catch(function () {
          var live = document.getElementById("live");
          if (live) { live.textContent = "reconnecting"; live.classList.add("stale"); }
          poll();
        });
    }, wait);
  }

  function confirmDelete() {
    var input = document.getElementById("confirm");
    var button = document.getElementById("confirm-delete");
    if (!input || !button) return;
    var sync = function () { button.disabled = input.value !== input.getAttribute("data-expect"); };
    input.addEventListener("input", sync);
    sync();
  }

  function busyForms() {
    document.querySelectorAll("button[data-busy]").forEach(function (b) {
      b.form.addEventListener("submit", function () {
        setTimeout(function () { b.disabled = true; b.textContent = b.getAttribute("data-busy"); }, 0);
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () { poll(); confirmDelete(); busyForms(); });
})();
