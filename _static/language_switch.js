// The language switch: a button in each page's header that opens the same page in the
// other edition. The English book is the site's root; the Chinese edition (中文版) is the
// same tree of pages under zh/. Pages only the Chinese edition has (the glossary, the
// setup page for mainland China) switch to their nearest English page.
(function () {
  "use strict";
  var ONLY_CHINESE = {
    "book/glossary.html": "book/notation.html",
    "book/setup_china.html": "book/setup.html",
  };
  function counterpart() {
    var root = new URL(document.documentElement.dataset.content_root || "./", location.href);
    var page = location.href.slice(root.href.length).split("#")[0].split("?")[0];
    if (document.documentElement.lang.startsWith("zh")) {
      return { href: new URL("../" + (ONLY_CHINESE[page] || page), root).href, label: "English",
               title: "Read this page in English", lang: "en" };
    }
    return { href: new URL("zh/" + page, root).href, label: "中文",
             title: "阅读本页的中文版", lang: "zh-CN" };
  }
  function addButton() {
    var other = counterpart();
    var link = document.createElement("a");
    link.className = "btn btn-sm language-switch";
    link.href = other.href;
    link.textContent = other.label;
    link.title = other.title;
    link.hreflang = other.lang;
    link.lang = other.lang;
    var header = document.querySelector(".article-header-buttons");
    if (header) {
      header.insertBefore(link, header.firstChild);
    } else {
      document.body.insertBefore(link, document.body.firstChild);
    }
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", addButton);
  } else {
    addButton();
  }
})();
