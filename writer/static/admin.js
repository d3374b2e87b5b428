// The administration's small helpers; every form works without them.
// - a form marked data-guard asks before a page with unsaved changes is left, and its
//   Cancel (data-cancel) asks before it discards them;
// - a select marked data-autosubmit submits its form when it changes;
// - a link target input (data-picker) searches the workspace's cards as one types;
// - a button marked data-confirm asks its question first (Decline all: it cannot be undone).
(function () {
  "use strict";
  function serialize(form) {
    return Array.from(new FormData(form).entries())
      .filter(function (e) { return e[0] !== "_csrf_token"; })
      .map(function (e) { return e[0] + "=" + e[1]; }).join("&");
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("button[data-confirm]").forEach(function (button) {
      button.addEventListener("click", function (event) {
        if (!window.confirm(button.dataset.confirm)) { event.preventDefault(); }
      });
    });
    document.querySelectorAll("select[data-autosubmit]").forEach(function (select) {
      select.addEventListener("change", function () { select.form.submit(); });
    });
    document.querySelectorAll("form[data-guard]").forEach(function (form) {
      var initial = serialize(form);
      var leaving = false;
      function dirty() { return !leaving && serialize(form) !== initial; }
      form.addEventListener("submit", function () { leaving = true; });
      window.addEventListener("beforeunload", function (event) {
        if (dirty()) { event.preventDefault(); event.returnValue = ""; }
      });
      form.querySelectorAll("[data-cancel]").forEach(function (link) {
        link.addEventListener("click", function (event) {
          if (!dirty()) { return; }
          if (window.confirm("Discard your unsaved changes?")) { leaving = true; }
          else { event.preventDefault(); }
        });
      });
    });
    var list = document.getElementById("card-picker");
    var timer = null;
    document.querySelectorAll("input[data-picker]").forEach(function (input) {
      input.addEventListener("input", function () {
        var q = input.value.trim();
        if (timer) { clearTimeout(timer); }
        if (!list || q.length < 2 || q.indexOf("mem-") === 0) { return; }
        timer = setTimeout(function () {
          fetch(input.dataset.picker + "?q=" + encodeURIComponent(q), {credentials: "same-origin"})
            .then(function (r) { return r.ok ? r.json() : {cards: []}; })
            .then(function (data) {
              list.replaceChildren.apply(list, data.cards.map(function (c) {
                var option = document.createElement("option");
                option.value = c.id;
                option.label = c.title + " (" + c.family + ")";
                return option;
              }));
            });
        }, 200);
      });
    });
  });
})();
