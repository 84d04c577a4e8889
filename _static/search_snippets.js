// Search results whose snippet is the page's prose. Sphinx's search (searchtools.js) takes
// a result's text from the page's whole [role="main"] block, which in this theme begins
// with the header buttons and a print-only contents list: a snippet read "04 · Scaled
// dot-product attention Contents Why attention ...". Here the text comes from the
// article alone (the title, then the prose), anchors within it still honoured.
document.addEventListener("DOMContentLoaded", function () {
  "use strict";
  if (typeof Search === "undefined" || typeof Search.htmlToText !== "function") {
    return; // not the search page
  }
  var wholeMain = Search.htmlToText;
  Search.htmlToText = function (htmlString, anchor) {
    var page = new DOMParser().parseFromString(htmlString, "text/html");
    var article = page.querySelector('[role="main"] article');
    if (!article) {
      return wholeMain(htmlString, anchor);
    }
    return wholeMain('<div role="main">' + article.outerHTML + "</div>", anchor);
  };
});
