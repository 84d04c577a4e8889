// Inline math and the punctuation that follows it stay on one line: a full stop or a
// comma never starts a line alone after an equation ("≈ 0.7⏎."). Runs before MathJax
// typesets (its own start waits for the same event, registered later), moving each
// inline equation and its punctuation into a <span class="math-nowrap"> (custom.css).
(function () {
  "use strict";
  var PUNCTUATION = /^[.,;:!?)\]’”%…，。；：！？、）」』]+/;
  function keepTogether() {
    document.querySelectorAll("main span.math").forEach(function (math) {
      var next = math.nextSibling;
      if (!next || next.nodeType !== Node.TEXT_NODE) { return; }
      var match = PUNCTUATION.exec(next.data);
      if (!match) { return; }
      var pair = document.createElement("span");
      pair.className = "math-nowrap";
      math.parentNode.insertBefore(pair, math);
      pair.appendChild(math);
      next.data = next.data.slice(match[0].length);
      pair.appendChild(document.createTextNode(match[0]));
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", keepTogether);
  } else {
    keepTogether();
  }
})();
