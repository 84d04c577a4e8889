// The language switch: a button in each page's header that opens the same page in the
// other edition, at the same section. The English book is the site's root; the Chinese
// edition (中文版) is the same tree of pages under zh/. Pages only the Chinese edition has
// (the glossary, the setup page for mainland China) switch to their nearest English page.
// The two editions' sections have different ids (their headings are in different
// languages) but come in the same order, so the switch passes the section's position
// (#section-N) and the page it opens scrolls to its own N-th section.
(function () {
  "use strict";
  var ONLY_CHINESE = {
    "book/glossary.html": "book/notation.html",
    "book/setup_china.html": "book/setup.html",
  };
  var POSITION = /^#section-(\d+)$/;
  function counterpart() {
    var root = new URL(document.documentElement.dataset.content_root || "./", location.href);
    var page = location.href.slice(root.href.length).split("#")[0].split("?")[0];
    if (document.documentElement.lang.startsWith("zh")) {
      return { href: new URL("../" + (ONLY_CHINESE[page] || page), root).href, label: "English",
               short: "EN", title: "Read this page in English", lang: "en",
               sameSections: !ONLY_CHINESE[page] };
    }
    return { href: new URL("zh/" + page, root).href, label: "中文", short: "中文",
             title: "阅读本页的中文版", lang: "zh-CN", sameSections: true };
  }
  function sections() {
    return Array.prototype.slice.call(document.querySelectorAll("main section[id]"));
  }
  // The position of the section the reader is at: the one the address names, else the
  // last one whose top has scrolled past the top of the window.
  function currentSection() {
    var all = sections();
    var named = location.hash && document.getElementById(decodeURIComponent(location.hash.slice(1)));
    var section = named && named.closest("section[id]");
    if (section && all.indexOf(section) > 0) {
      return all.indexOf(section);
    }
    var at = -1;
    all.forEach(function (s, i) {
      if (s.getBoundingClientRect().top <= 80) { at = i; }
    });
    return at;
  }
  function addButton() {
    var other = counterpart();
    var link = document.createElement("a");
    link.className = "btn btn-sm language-switch";
    link.href = other.href;
    link.title = other.title;
    link.hreflang = other.lang;
    link.lang = other.lang;
    [["long-label", other.label], ["short-label", other.short]].forEach(function (part) {
      var span = document.createElement("span");
      span.className = part[0];
      span.textContent = part[1];
      link.appendChild(span);
    });
    link.addEventListener("click", function () {
      var at = other.sameSections ? currentSection() : -1;
      link.href = other.href + (at > 0 ? "#section-" + at : "");
    });
    var header = document.querySelector(".article-header-buttons");
    if (header) {
      header.insertBefore(link, header.firstChild);
    } else {
      document.body.insertBefore(link, document.body.firstChild);
    }
  }
  // Arrived from the other edition at section N: go to this page's N-th section, and
  // put its own id in the address.
  function goToPosition() {
    var match = POSITION.exec(location.hash);
    var section = match && sections()[Number(match[1])];
    if (section) {
      history.replaceState(null, "", "#" + section.id);
      section.scrollIntoView();
    }
  }
  function start() {
    addButton();
    if (POSITION.test(location.hash)) {
      var id = location.hash;
      goToPosition();
      // MathJax and images change the heights above the section: scroll again once done.
      window.addEventListener("load", function () {
        var typeset = window.MathJax && MathJax.startup && MathJax.startup.promise;
        (typeset || Promise.resolve()).then(function () {
          var section = document.getElementById(location.hash.slice(1));
          if (section && location.hash !== id) { section.scrollIntoView(); }
        });
      });
    }
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
