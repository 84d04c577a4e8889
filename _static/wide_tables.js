// A table wider than its column (on a phone) scrolls in its box; while part of it is
// hidden past the right edge, the box has the class "more-to-the-right", which fades
// that edge out (custom.css): a cue that the table goes on.
(function () {
  "use strict";
  var BOXES = ".pst-scrollable-table-container, div.cell_output div.output.text_html";
  function mark(box) {
    var hidden = box.scrollWidth - box.clientWidth - box.scrollLeft > 1;
    box.classList.toggle("more-to-the-right", hidden);
  }
  function markAll() {
    document.querySelectorAll(BOXES).forEach(mark);
  }
  function start() {
    document.querySelectorAll(BOXES).forEach(function (box) {
      box.style.overflowX = "auto";
      box.addEventListener("scroll", function () { mark(box); }, { passive: true });
    });
    markAll();
    window.addEventListener("resize", markAll);
    // Typeset equations change the tables' widths: look again once MathJax is done.
    var typeset = window.MathJax && MathJax.startup && MathJax.startup.promise;
    if (typeset) { typeset.then(markAll); }
  }
  if (document.readyState === "complete") {
    start();
  } else {
    window.addEventListener("load", start);
  }
})();
