// The dashboard's small behaviours; the pages work without them.
(function () {
  "use strict";

  // Times in the viewer's zone: the server reads this cookie (ViewerTimezoneMiddleware).
  try {
    var zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
    // IANA names ("Asia/Tokyo") are cookie-safe as they are; the server reads them verbatim.
    if (zone && /^[A-Za-z0-9_+\-\/]+$/.test(zone) && document.cookie.indexOf("tz=" + zone) === -1) {
      document.cookie = "tz=" + zone + "; path=/; max-age=31536000; samesite=lax";
    }
  } catch (e) { /* no Intl: times stay in the server's zone */ }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("button.copy");
    if (!button) return;
    var source = document.getElementById(button.getAttribute("data-copy"));
    if (!source) return;
    var text = source.textContent;
    var done = function () {
      button.textContent = "Copied";
      setTimeout(function () { button.textContent = "Copy"; }, 1500);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () { selectText(source); });
    } else {
      selectText(source);
      try { document.execCommand("copy"); done(); } catch (e) { /* selected: ctrl-c */ }
    }
  });

  function selectText(node) {
    var range = document.createRange();
    range.selectNodeContents(node);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }

  // A checkpoint's digest loads when its section is first opened.
  document.addEventListener("toggle", function (event) {
    var details = event.target;
    if (!details.open || !details.querySelector) return;
    var slot = details.querySelector("[data-digest]");
    if (!slot || slot.getAttribute("data-loaded")) return;
    slot.setAttribute("data-loaded", "1");
    fetch(slot.getAttribute("data-digest"), { credentials: "same-origin" })
      .then(function (response) { return response.ok && !response.redirected ? response.text() : null; })
      .then(function (html) { if (html !== null) slot.innerHTML = html; })
      .catch(function () { slot.removeAttribute("data-loaded"); });
  }, true);

  document.addEventListener("change", function (event) {
    if (event.target.hasAttribute("data-autosubmit")) event.target.form.submit();
  });

  document.addEventListener("submit", function (event) {
    var message = event.target.getAttribute("data-confirm");
    if (message && !window.confirm(message)) event.preventDefault();
  });

  // Live sessions: re-fetch the table's rows every 10 s while the tab is visible.
  var body = document.querySelector("tbody[data-poll]");
  if (body) {
    setInterval(function () {
      if (document.hidden) return;
      fetch(body.getAttribute("data-poll"), { credentials: "same-origin" })
        // Logged out meanwhile: the request lands on the login page; leave the rows alone.
        .then(function (response) { return response.ok && !response.redirected ? response.text() : null; })
        .then(function (html) { if (html !== null) body.innerHTML = html; })
        .catch(function () { /* offline: try again next time */ });
    }, 10000);
  }
})();
