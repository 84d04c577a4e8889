// The attention explorer: on a page that holds
//   <div class="attention-explorer" data-src="translator"></div>
// (or data-src="gpt"), the reader picks a sentence, a layer, a head and (for the
// translator) the kind of attention, then hovers, taps or focuses a token to see what it
// attends to: as lines between the two rows of tokens and as a row of the heatmap.
// Optional attributes preselect: data-sentence (index), data-kind (cross, enc_self,
// dec_self), data-layer (index; negative counts from the last), data-head (index or
// "mean"), data-query (the index of the token of the upper row shown first). The weights are the trained models' own, exported by
// tools/export_attention.py into _static/explorer/NAME.json (fetched over http) and
// NAME.html (a page that posts the same data, for a book opened as files). No library,
// no network. Every cell and token shows its weight as data-weight (the tests read it).
(function () {
  "use strict";
  // Where this script was loaded from: the data sits beside it in explorer/. (The
  // Chinese edition's pages load the English edition's _static, so the page's own
  // root is not where the data is.)
  var SCRIPT = document.currentScript ? document.currentScript.src : null;
  var WORDS = {
    en: {
      sentence: "Sentence", line: "Text", kind: "Attention", layer: "Layer",
      head: "Head", mean: "all heads averaged", cross: "cross (Chinese → English)",
      enc_self: "encoder self (English → English)",
      dec_self: "decoder self (Chinese → Chinese)", self: "self (causal)",
      layerName: function (l) { return "layer " + l; },
      headName: function (h) { return "head " + h; },
      temperature: "temperature ", tokens: " tokens", stop: ". ",
      hint: "Hover, tap or focus a token in the top row to see what it attends to.",
      attends: " attends to: ", loading: "Loading the attention weights…",
      failed: "The attention weights could not be loaded: ",
      heatmap: "Heatmap: a row per query (attending), a column per key (attended to); " +
        "brighter is more weight.",
      samples: "Samples of this model", prompt: "prompt", seed: "seed",
      val: "Validation text (never trained on).",
      model: function (d) {
        return d.params.toLocaleString("en") + " parameters, " + d.config.n_layers +
          " layers × " + d.config.n_heads + " heads";
      },
      run: function (d) {
        return "Trained for " + Math.round(d.train_time_s / 60) + " minutes (" +
          d.machine.split(" | ")[0] + "); validation loss " + d.val_loss.toFixed(3) + ".";
      },
    },
    zh: {
      sentence: "句子", line: "文本", kind: "注意力", layer: "层", head: "头",
      mean: "所有头的平均", cross: "交叉注意力（中文 → 英文）",
      enc_self: "编码器自注意力（英文 → 英文）",
      dec_self: "解码器自注意力（中文 → 中文）", self: "自注意力（因果）",
      layerName: function (l) { return "第 " + l + " 层"; },
      headName: function (h) { return "第 " + h + " 个头"; },
      temperature: "温度 ", tokens: " 个词元", stop: "。",
      hint: "将鼠标移到上面一行的词元上（或轻触、用键盘聚焦），看它关注哪些词元。",
      attends: " 关注：", loading: "正在载入注意力权重……",
      failed: "无法载入注意力权重：",
      heatmap: "热力图：每行一个查询（发出关注者），每列一个键（被关注者）；越亮权重越大。",
      samples: "该模型的采样文本", prompt: "提示", seed: "种子",
      val: "验证集文本（训练时从未见过）。",
      model: function (d) {
        return d.params.toLocaleString("en") + " 个参数，" + d.config.n_layers +
          " 层 × " + d.config.n_heads + " 个头";
      },
      run: function (d) {
        return "训练 " + Math.round(d.train_time_s / 60) + " 分钟（" +
          d.machine.split(" | ")[0] + "），验证损失 " + d.val_loss.toFixed(3) + "。";
      },
    },
  };
  var VIRIDIS = ["#440154", "#482878", "#3e4989", "#31688e", "#26828e", "#1f9e89",
                 "#35b779", "#6ece58", "#b5de2b", "#fde725"];
  var loaded = {};

  function language() {
    var lang = document.documentElement.lang || "";
    return lang.indexOf("zh") === 0 || /\/zh\//.test(location.pathname) ? "zh" : "en";
  }

  // The site's root (the edition's root for the Chinese one), as language_switch.js
  // finds it: Sphinx writes the path from the page to the root on <html>.
  function siteRoot() {
    return new URL(document.documentElement.dataset.content_root || "./", location.href);
  }

  // NAME.html posts its data to the page that framed it: works where fetch does not.
  function viaFrame(name, href) {
    return new Promise(function (resolve, reject) {
      var frame = document.createElement("iframe");
      var timer = setTimeout(function () { done(null); }, 20000);
      function done(data) {
        clearTimeout(timer);
        window.removeEventListener("message", onMessage);
        frame.remove();
        return data ? resolve(data) : reject(new Error(href));
      }
      function onMessage(event) {
        var m = event.data;
        if (event.source === frame.contentWindow && m && m.attentionExplorer === name) {
          done(m.data);
        }
      }
      window.addEventListener("message", onMessage);
      frame.hidden = true;
      frame.title = name;
      frame.src = href;
      document.body.appendChild(frame);
    });
  }

  function load(name) {
    if (!loaded[name]) {
      var base = SCRIPT
        ? new URL("explorer/" + name, SCRIPT).href
        : new URL("_static/explorer/" + name, siteRoot()).href;
      var files = location.protocol === "file:";  // fetch is refused there: no try
      loaded[name] = (files ? Promise.reject(new Error("file:")) : fetch(base + ".json"))
        .then(function (r) {
          if (!r.ok) { throw new Error(r.status); }
          return r.json();
        })
        .catch(function () { return viaFrame(name, base + ".html"); });
    }
    return loaded[name];
  }

  function colour(x) {  // x in [0, 1] -> viridis, the course's attention colour map
    var t = Math.max(0, Math.min(1, x)) * (VIRIDIS.length - 1);
    var i = Math.min(Math.floor(t), VIRIDIS.length - 2);
    var a = hex(VIRIDIS[i]), b = hex(VIRIDIS[i + 1]), f = t - i;
    return "rgb(" + [0, 1, 2].map(function (k) {
      return Math.round(a[k] + (b[k] - a[k]) * f);
    }).join(",") + ")";
  }
  function hex(c) {
    return [1, 3, 5].map(function (i) { return parseInt(c.slice(i, i + 2), 16); });
  }

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined) { e.textContent = text; }
    return e;
  }
  var SVG = "http://www.w3.org/2000/svg";
  function svg(tag, attrs) {
    var e = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    return e;
  }
  function shown(token) {  // spaces and line ends drawn visibly
    return token === " " ? "␣" : token === "\n" ? "⏎" : token;
  }

  // What one choice shows: the query and key tokens, and the (H, T_q, T_k) weights of
  // each layer.
  function view(data, isGpt, item, kind) {
    if (isGpt) {
      var line = data.lines[item];
      return { queries: line.tokens, keys: line.tokens, layers: line.self };
    }
    var s = data.sentences[item];
    if (kind === "cross") {
      return { queries: s.tgt_tokens, keys: s.src_tokens, layers: s.cross };
    }
    if (kind === "enc_self") {
      return { queries: s.src_tokens, keys: s.src_tokens, layers: s.enc_self };
    }
    // a decoder row writes tgt_tokens[t]; it reads <bos> and the tokens before it
    var inputs = ["<bos>"].concat(s.tgt_tokens.slice(0, -1));
    return { queries: s.tgt_tokens, keys: inputs, layers: s.dec_self };
  }

  // (T_q, T_k) weights of one head, or the heads' mean rounded as the export rounds
  function matrix(heads, head) {
    if (head !== "mean") { return heads[head]; }
    return heads[0].map(function (row, i) {
      return row.map(function (_, j) {
        var sum = 0;
        heads.forEach(function (h) { sum += h[i][j]; });
        return Math.round((sum / heads.length) * 1000) / 1000;
      });
    });
  }

  function picker(pick, label, options, value, onChange) {
    var wrap = el("label", "ae-picker");
    wrap.appendChild(el("span", "ae-picker-label", label));
    var select = el("select");
    select.setAttribute("data-pick", pick);
    options.forEach(function (o) {
      var opt = el("option", null, o[1]);
      opt.value = String(o[0]);
      select.appendChild(opt);
    });
    select.value = String(value);
    select.addEventListener("change", function () { onChange(select.value); });
    wrap.appendChild(select);
    return wrap;
  }

  function start(root) {
    var W = WORDS[language()];
    var name = root.dataset.src === "gpt" ? "gpt" : "translator";
    var isGpt = name === "gpt";
    root.classList.add("ae-root");
    root.setAttribute("data-ready", "0");
    root.textContent = W.loading;
    load(name).then(function (data) {
      build(root, data, isGpt, W);
    }).catch(function (e) {
      root.textContent = W.failed + e.message;
      root.setAttribute("data-ready", "error");
    });
  }

  function build(root, data, isGpt, W) {
    var items = isGpt ? data.lines : data.sentences;
    var L = (isGpt ? items[0].self : items[0].cross).length;
    var H = (isGpt ? items[0].self : items[0].cross)[0].length;
    var d = root.dataset;
    var layer = parseInt(d.layer || "-1", 10);
    var head = d.head === undefined || d.head === "mean" ? "mean" : parseInt(d.head, 10);
    var state = {
      item: Math.min(Math.max(parseInt(d.sentence || "0", 10) || 0, 0), items.length - 1),
      kind: isGpt ? "self" : ["cross", "enc_self", "dec_self"].indexOf(d.kind) >= 0 ?
        d.kind : "cross",
      layer: Math.min(Math.max(layer < 0 ? L + layer : layer, 0), L - 1),
      head: head === "mean" || (head >= 0 && head < H) ? head : "mean",
      query: d.query === undefined ? null : parseInt(d.query, 10) || 0,
    };
    root.textContent = "";
    var controls = el("div", "ae-controls");
    var caption = el("p", "ae-caption");
    var about = el("p", "ae-note");
    var hint = el("p", "ae-note", W.hint);
    var lines = el("div", "ae-lines");
    var readout = el("p", "ae-readout");
    readout.setAttribute("aria-live", "polite");
    var heat = el("div", "ae-heatmap");
    var note = el("p", "ae-note", W.heatmap);
    var itemOptions = items.map(function (it, i) {
      var text = isGpt ? it.text : it.source;
      return [i, text.length > 48 ? text.slice(0, 46) + "…" : text];
    });
    controls.appendChild(picker("item", isGpt ? W.line : W.sentence, itemOptions, state.item,
      function (v) { state.item = +v; state.query = null; draw(); }));
    if (!isGpt) {
      var kinds = ["cross", "enc_self", "dec_self"].map(function (k) { return [k, W[k]]; });
      controls.appendChild(picker("kind", W.kind, kinds, state.kind,
        function (v) { state.kind = v; state.query = null; draw(); }));
    }
    var layers = [];
    for (var l = 0; l < L; l++) { layers.push([l, W.layerName(l)]); }
    controls.appendChild(picker("layer", W.layer, layers, state.layer,
      function (v) { state.layer = +v; draw(); }));
    var heads = [["mean", W.mean]];
    for (var h = 0; h < H; h++) { heads.push([h, W.headName(h)]); }
    controls.appendChild(picker("head", W.head, heads, state.head,
      function (v) { state.head = v === "mean" ? "mean" : +v; draw(); }));
    [controls, caption, about, hint, lines, readout, heat, note].forEach(function (e) {
      root.appendChild(e);
    });
    if (isGpt && data.samples && data.samples.length) {
      root.appendChild(samplesBlock(data, W));
    }
    root.addEventListener("mouseover", pick);
    root.addEventListener("focusin", pick);
    root.addEventListener("click", pick);
    function pick(event) {
      var t = event.target.closest && event.target.closest("[data-query]");
      if (t && root.contains(t)) {
        var q = +t.getAttribute("data-query");
        if (q !== state.query) { state.query = q; highlight(); }
      }
    }

    var current;
    function draw() {
      var v = view(data, isGpt, state.item, state.kind);
      var w = matrix(v.layers[state.layer], state.head);
      current = { v: v, w: w };
      if (state.query === null || state.query >= v.queries.length) {
        state.query = isGpt ? v.queries.length - 1 : 0;  // the last character sees all
      }
      var it = items[state.item];
      caption.textContent = isGpt ? W.val : it.source + " → " + it.translation;
      about.textContent = W.model(data) + W.stop + (isGpt ? W.run(data) : "");
      drawLines(lines, v, w);
      drawHeatmap(heat, v, w);
      ["item", "kind", "layer", "head"].forEach(function (k) {
        root.setAttribute("data-" + k, String(state[k]));
      });
      highlight();
      root.setAttribute("data-ready", "1");
    }
    draw();

    function highlight() {
      var v = current.v, w = current.w, q = state.query;
      root.setAttribute("data-query", String(q));
      var row = w[q];
      var max = Math.max.apply(null, row) || 1;
      lines.querySelectorAll(".ae-q").forEach(function (g, i) {
        g.classList.toggle("ae-active", i === q);
        g.setAttribute("aria-pressed", i === q ? "true" : "false");
      });
      lines.querySelectorAll(".ae-k").forEach(function (g, j) {
        g.setAttribute("data-weight", String(row[j]));
        g.querySelector("rect").setAttribute("fill", colour(row[j] / max));
        g.querySelector("rect").setAttribute("fill-opacity", String(0.15 + 0.85 * row[j] / max));
        g.querySelector("text").setAttribute("fill", row[j] / max > 0.55 ? "#000" : "#fff");
        g.querySelector("title").textContent = shown(v.keys[j]) + ": " + row[j].toFixed(3);
      });
      lines.querySelectorAll(".ae-link").forEach(function (p, j) {
        p.setAttribute("data-weight", String(row[j]));
        p.setAttribute("x1", lines._qx[q]);
        p.setAttribute("stroke-opacity", String(row[j] / max));
        p.setAttribute("stroke-width", String(0.5 + 4 * row[j] / max));
      });
      heat.querySelectorAll(".ae-row").forEach(function (r) {
        r.classList.toggle("ae-active", +r.getAttribute("data-query") === q);
      });
      var order = row.map(function (x, j) { return j; })
        .sort(function (a, b) { return row[b] - row[a]; }).slice(0, 3);
      readout.textContent = "“" + shown(v.queries[q]) + "”" + W.attends + order.map(
        function (j) { return shown(v.keys[j]) + " " + row[j].toFixed(3); }).join(" · ");
    }
  }

  // Two rows of tokens, queries above and keys below, and a line from the chosen query
  // to every key, as thick and opaque as its weight.
  function drawLines(box, v, w) {
    var size = 15, gap = 6;
    var width = function (t) {
      return Math.max(16, Array.from(shown(t)).reduce(function (s, ch) {
        return s + (ch.charCodeAt(0) > 0x2e80 ? size : size * 0.62);
      }, 0) + gap);
    };
    var qw = v.queries.map(width), kw = v.keys.map(width);
    var sum = function (a) { return a.reduce(function (s, x) { return s + x; }, 0); };
    var total = Math.max(sum(qw), sum(kw)) + 8;
    var height = 120, top = 4, bottom = height - 28;
    var root = svg("svg", { viewBox: "0 0 " + total + " " + height, role: "img" });
    root.style.maxWidth = total + "px";
    root.style.minWidth = Math.min(total, Math.round(total * 0.6)) + "px";
    var links = svg("g", { class: "ae-links" });
    root.appendChild(links);
    var row = function (tokens, widths, y, cls) {
      var x = (total - sum(widths)) / 2, centres = [];
      tokens.forEach(function (t, i) {
        var g = svg("g", { class: cls });
        var rect = svg("rect", { x: x + 1, y: y, width: widths[i] - 2, height: 24, rx: 3 });
        var text = svg("text", { x: x + widths[i] / 2, y: y + 17, "text-anchor": "middle" });
        text.textContent = shown(t);
        var title = svg("title");
        title.textContent = shown(t);
        g.appendChild(title);
        g.appendChild(rect);
        g.appendChild(text);
        if (cls === "ae-q") {
          g.setAttribute("data-query", i);
          g.setAttribute("tabindex", "0");
          g.setAttribute("role", "button");
        } else {
          g.setAttribute("data-key", i);
        }
        root.appendChild(g);
        centres.push(x + widths[i] / 2);
        x += widths[i];
      });
      return centres;
    };
    var qx = row(v.queries, qw, top, "ae-q");
    var kx = row(v.keys, kw, bottom, "ae-k");
    kx.forEach(function (x, j) {
      links.appendChild(svg("line", {
        class: "ae-link", "data-key": j, x1: qx[0], y1: top + 24, x2: x, y2: bottom,
      }));
    });
    box.textContent = "";
    box._qx = qx;
    box.appendChild(root);
  }

  // The heatmap: a grid of cells, each coloured by its weight (0 to the matrix's
  // largest, as the course's figures), its value in data-weight and its title.
  function drawHeatmap(box, v, w) {
    var max = Math.max.apply(null, w.map(function (r) { return Math.max.apply(null, r); }));
    var grid = el("div", v.keys.length > 20 ? "ae-grid ae-dense" : "ae-grid");
    var most = v.keys.length > 20 ? "1.1rem" : "1.7rem";  // a long line stays short
    grid.style.gridTemplateColumns = "max-content repeat(" + v.keys.length +
      ", minmax(0, " + most + "))";
    grid.appendChild(el("span", "ae-corner"));
    v.keys.forEach(function (k) {  // a short token stands upright, a long one turns
      var label = shown(k);
      grid.appendChild(el("span", Array.from(label).length <= 2 ? "ae-col ae-upright" :
        "ae-col", label));
    });
    w.forEach(function (row, i) {
      var r = el("div", "ae-row");
      r.setAttribute("data-query", i);
      r.appendChild(el("span", "ae-rowlabel", shown(v.queries[i])));
      row.forEach(function (x, j) {
        var c = el("span", "ae-cell");
        c.setAttribute("data-row", i);
        c.setAttribute("data-col", j);
        c.setAttribute("data-weight", String(x));
        c.title = shown(v.queries[i]) + " → " + shown(v.keys[j]) + ": " + x.toFixed(3);
        c.style.background = colour(max ? x / max : 0);
        r.appendChild(c);
      });
      grid.appendChild(r);
    });
    box.textContent = "";
    box.appendChild(grid);
  }

  function samplesBlock(data, W) {
    var box = el("details", "ae-samples");
    box.open = true;  // the best model's own text, shown at once
    box.appendChild(el("summary", null, W.samples));
    data.samples.forEach(function (s) {
      var st = s.settings;
      box.appendChild(el("p", "ae-sample-meta", W.prompt + " “" + s.prompt + "”, " +
        W.seed + " " + s.seed + ", " + W.temperature + st.temperature + ", top-k " +
        st.top_k + ", " + st.max_new_tokens + W.tokens));
      box.appendChild(el("pre", "ae-sample", s.text));
    });
    return box;
  }

  function startAll() {
    document.querySelectorAll("div.attention-explorer").forEach(start);
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", startAll);
  } else {
    startAll();
  }
})();
