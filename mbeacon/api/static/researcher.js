
(function () {
  "use strict";
  // The researcher page. The key lives only in the password field (this page's memory): it is sent
  // in the Authorization header and never written to storage, a cookie or a URL.
  var app = document.getElementById("app");
  var base = app.dataset.base;
  var SVG = "http://www.w3.org/2000/svg";
  var el = function (id) { return document.getElementById(id); };
  var datasets = {};      // id -> the dataset's entry in /datasets
  var curve = null;       // the last /prior answer drawn
  var lastAnswer = null;  // {dataset, probe, lo, hi, exists, from} of the last answer, marked on the curve
  var asked = 0;
  var curveSeq = 0;       // only the newest /prior request may draw (answers can arrive out of order)
  var timers = {};

  function debounce(name, wait, fn) {
    clearTimeout(timers[name]);
    timers[name] = setTimeout(fn, wait);
  }

  function headers() {
    var h = {"Accept": "application/json"};
    var key = el("key").value.trim();
    if (key) h["Authorization"] = "Bearer " + key;
    return h;
  }

  // One GET to the beacon: {ok, status, body}; body is the parsed JSON (or null).
  function get(path, params) {
    var url = base + path + (params ? "?" + new URLSearchParams(params).toString() : "");
    return fetch(url, {headers: headers(), cache: "no-store", credentials: "omit"}).then(function (r) {
      return r.text().then(function (text) {
        var body = null;
        try { body = JSON.parse(text); } catch (ignored) { body = null; }
        return {ok: r.ok, status: r.status, body: body, text: text};
      });
    });
  }

  function errorText(res) {
    var e = res.body && res.body.error;
    return e && e.errorMessage ? e.errorMessage : (res.text || "no message").slice(0, 300);
  }

  function fmt(x, digits) { return Number(x).toFixed(digits === undefined ? 2 : digits); }
  function short(x) { return String(Number(Number(x).toFixed(3))); }  // 51.17, 100: no trailing zeros

  // --- datasets and budget ------------------------------------------------------------------------

  function loadDatasets() {
    return get("/datasets").then(function (res) {
      var select = el("dataset");
      var previous = select.value;
      select.replaceChildren();
      datasets = {};
      if (!res.ok) {
        select.appendChild(new Option("(cannot list datasets)", ""));
        showError(res, "listing datasets");
        return;
      }
      var list = (res.body.response && res.body.response.collections) || [];
      list.forEach(function (d) {
        datasets[d.id] = d;
        select.appendChild(new Option(d.name ? d.id + " \u2014 " + d.name : d.id, d.id));
      });
      if (!list.length) {
        select.appendChild(new Option("(no dataset available to you)", ""));
        el("dataset-note").textContent = el("key").value.trim() ? "Your key may query no dataset here." :
          "Enter your key: it shows the datasets you may query.";
        return;
      }
      if (previous && datasets[previous]) select.value = previous;
      datasetChanged();
    });
  }

  function datasetChanged() {
    var d = datasets[el("dataset").value];
    var note = el("dataset-note");
    if (!d) { note.textContent = ""; return; }
    var p = d.info.privacy || {};
    note.textContent = d.info.patients + " patients, " + d.info.probes + " probes. A yes means at least " +
      p.threshold + " patients in the range; you may get " + p.c + " answers from the data.";
    loadBudget();
    if (!el("probe").value.trim()) {
      suggest().then(function (ids) { if (ids.length && !el("probe").value.trim()) { el("probe").value = ids[0]; loadCurve(); } });
    } else {
      loadCurve();
    }
  }

  function setMeters(b) {
    if (!b) {
      el("positives-meter").value = 0; el("positives-text").textContent = "\u2014";
      el("epsilon-meter").value = 0; el("epsilon-text").textContent = "\u2014";
      return;
    }
    var posLeft = b.positivesTotal - b.positivesUsed;
    var epsLeft = Math.max(0, b.epsilonTotal - b.epsilonSpent);
    var pm = el("positives-meter"), em = el("epsilon-meter");
    pm.max = Math.max(1, b.positivesTotal); pm.value = posLeft;
    pm.low = Math.min(1, pm.max); pm.optimum = pm.max;
    em.max = b.epsilonTotal || 1; em.value = epsLeft;
    em.low = em.max * 0.2; em.optimum = em.max;
    el("positives-text").textContent = posLeft + " of " + b.positivesTotal;
    el("epsilon-text").textContent = short(epsLeft) + " of " + short(b.epsilonTotal);
  }

  function loadBudget() {
    var dataset = el("dataset").value;
    if (!el("key").value.trim() || !dataset) { setMeters(null); return Promise.resolve(); }
    return get("/budget").then(function (res) {
      if (!res.ok) { setMeters(null); return; }
      setMeters(res.body.response.budgets[dataset] || null);
    });
  }

  // --- probes and the prior curve -----------------------------------------------------------------

  function suggest() {
    var dataset = el("dataset").value;
    if (!dataset) return Promise.resolve([]);
    return get("/prior/probes", {datasetId: dataset, prefix: el("probe").value.trim()}).then(function (res) {
      var list = el("probe-list");
      list.replaceChildren();
      var ids = res.ok ? res.body.probeIds : [];
      ids.forEach(function (id) { var o = document.createElement("option"); o.value = id; list.appendChild(o); });
      return ids;
    });
  }

  function bounds() {
    var lo = el("min").value.trim(), hi = el("max").value.trim();
    return {lo: lo === "" ? 0 : Number(lo), hi: hi === "" ? 1 : Number(hi), loText: lo, hiText: hi};
  }

  function loadCurve() {
    clearTimeout(timers.curve);
    var dataset = el("dataset").value, probe = el("probe").value.trim();
    if (!dataset || !probe) return;
    var seq = ++curveSeq;
    var params = {datasetId: dataset, probeId: probe};
    var b = bounds();
    if (b.loText !== "") params.minValue = b.loText;
    if (b.hiText !== "") params.maxValue = b.hiText;
    get("/prior", params).then(function (res) {
      if (seq !== curveSeq) return;
      el("prior-probe").textContent = probe;
      if (!res.ok) {  // a bad range keeps the probe's bars, without a range; another probe's curve goes
        if (curve && curve.datasetId === dataset && curve.probeId === probe) {
          curve.range = null;
        } else {
          curve = null;
        }
        draw();
        el("chart-caption").textContent = "No prior for this question: " + errorText(res);
        return;
      }
      curve = res.body;
      draw();
    });
  }

  function node(name, attrs, text) {
    var n = document.createElementNS(SVG, name);
    Object.keys(attrs).forEach(function (k) { n.setAttribute(k, attrs[k]); });
    if (text !== undefined) n.textContent = text;
    return n;
  }

  function draw() {
    var svg = el("chart");
    svg.replaceChildren();
    if (!curve) return;
    var W = 560, H = 300, L = 44, R = 14, T = 34, B = 42;
    var edges = curve.edges, probs = curve.probabilities;
    var dens = probs.map(function (p, i) { return p / (edges[i + 1] - edges[i]); });
    var top = Math.max.apply(null, dens.concat([1])) * 1.08;
    var x = function (v) { return L + v * (W - L - R); };
    var y = function (v) { return H - B - (v / top) * (H - T - B); };
    var range = curve.range;
    var lo = range ? range.minValue : 0, hi = range ? range.maxValue : 0;
    var marked = range && lastAnswer && lastAnswer.dataset === curve.datasetId && lastAnswer.probe === curve.probeId &&
      lastAnswer.lo === lo && lastAnswer.hi === hi ? lastAnswer : null;
    var state = marked ? (marked.exists ? "yes" : "no") : "asked";
    if (range) {
      svg.appendChild(node("rect", {"class": "band " + state, x: x(lo), y: T - 4,
        width: Math.max(1.5, x(hi) - x(lo)), height: H - B - T + 4}));
    }
    dens.forEach(function (d, i) {
      var inside = range && edges[i + 1] > lo && edges[i] < hi;
      svg.appendChild(node("rect", {"class": "bar" + (inside ? " in" : ""), x: x(edges[i]) + 0.5, y: y(d),
        width: Math.max(0.5, x(edges[i + 1]) - x(edges[i]) - 1), height: H - B - y(d)}));
    });
    svg.appendChild(node("line", {"class": "axis", x1: L, y1: H - B, x2: W - R, y2: H - B}));
    svg.appendChild(node("line", {"class": "axis", x1: L, y1: T - 4, x2: L, y2: H - B}));
    for (var t = 0; t <= 10; t += 2) {
      svg.appendChild(node("text", {"class": "tick", x: x(t / 10), y: H - B + 15, "text-anchor": "middle"}, fmt(t / 10, 1)));
    }
    svg.appendChild(node("text", {"class": "tick", x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle"},
      "methylation level (beta value)"));
    svg.appendChild(node("text", {"class": "tick", x: 12, y: (T + H - B) / 2, "text-anchor": "middle",
      transform: "rotate(-90 12 " + (T + H - B) / 2 + ")"}, "prior density"));
    if (!range) return;
    var label = marked ? (marked.exists ? "\u2714 yes" : "\u2718 no") + " \u00b7 from the " + marked.from
      : "asked: " + fmt(lo) + "\u2013" + fmt(hi);
    var mid = Math.min(Math.max(x((lo + hi) / 2), L + 50), W - R - 50);
    svg.appendChild(node("text", {"class": "mark " + state, x: mid, y: T - 12, "text-anchor": "middle"}, label));
    var model = curve.model === "uniform" ? "uniform (the prior does not know this probe)" :
      "prior \u201c" + curve.prior + "\u201d (" + curve.model + "): mean " + fmt(curve.mean) + ", sd " + fmt(curve.sd);
    el("chart-caption").textContent = "The public " + model + ". In [" + fmt(lo) + ", " + fmt(hi) +
      "] it expects " + fmt(curve.range.expectedPatients, 1) + " of " + curve.patients + " patients (" +
      fmt(100 * curve.range.probability, 1) + "%). No cohort data is drawn here.";
  }

  // --- asking -------------------------------------------------------------------------------------

  function showError(res, what) {
    el("answer").hidden = true;
    el("error").hidden = false;
    el("error-status").textContent = "HTTP " + res.status + (what ? " (" + what + ")" : "") + ": refused";
    el("error-message").textContent = errorText(res);
  }

  function addHistory(cells, kind) {
    var body = el("history").tBodies[0];
    var empty = body.querySelector("tr.empty");
    if (empty) empty.remove();
    var row = document.createElement("tr");
    cells.forEach(function (text, i) {
      var td = document.createElement("td");
      td.textContent = text;
      if (i === 4 && kind) td.className = kind;
      row.appendChild(td);
    });
    body.insertBefore(row, body.firstChild);
  }

  function ask(event) {
    event.preventDefault();
    var dataset = el("dataset").value, probe = el("probe").value.trim(), b = bounds();
    var params = {probeId: probe, includeResultsetResponses: "ALL"};
    if (dataset) params.datasetIds = dataset;
    if (b.loText !== "") params.minValue = b.loText;
    if (b.hiText !== "") params.maxValue = b.hiText;
    var range = (b.loText || "0") + "\u2013" + (b.hiText || "1");
    el("ask").disabled = true;
    el("status").textContent = "asking\u2026";
    loadCurve();  // the chart shows the question being asked, not one typed a moment ago
    asked += 1;
    var n = asked;
    get("/methylation", params).then(function (res) {
      el("status").textContent = "HTTP " + res.status;
      if (!res.ok) {
        showError(res);
        if (res.status === 429 && res.body && res.body.info) setMeters(res.body.info);
        addHistory([n, dataset, probe, range, "refused (HTTP " + res.status + "): " + errorText(res), "", ""], "err");
        return;
      }
      var sets = (res.body.response && res.body.response.resultSets) || [];
      var set = sets.filter(function (s) { return s.id === dataset; })[0] || sets[0];
      if (!set) { showError({status: res.status, body: null, text: "the answer lists no dataset"}); return; }
      var info = set.info || {};
      var from = info.answeredFrom;
      var yes = !!set.exists && from !== "refused";
      el("error").hidden = true;
      var box = el("answer");
      box.hidden = false;
      box.className = "answer " + (from === "refused" ? "" : yes ? "yes" : "no");
      el("answer-word").textContent = from === "refused" ? "Refused" : yes ? "Yes" : "No";
      var threshold = ((datasets[set.id] || {info: {privacy: {}}}).info.privacy.threshold) || "T";
      el("answer-detail").textContent = from === "refused" ? "your budget on this dataset is exhausted" :
        (threshold === 1 ? (yes ? "at least 1 patient has " : "no patient has ") :
          (yes ? "at least " : "fewer than ") + threshold + " patients have ") +
        probe + " in [" + range.replace("\u2013", ", ") + "]";
      var source = el("answer-source");
      source.replaceChildren();
      var badge = document.createElement("span");
      badge.className = "badge " + from;
      badge.textContent = "answered from the " + from;
      source.appendChild(badge);
      var why = {prior: " \u2014 the public prior's answer; free.",
                 data: " \u2014 the data disagree with the prior; this spent one positive.",
                 refused: " \u2014 not answered."}[from] || "";
      source.appendChild(document.createTextNode(why + (info.cached ? " Asked before: the same answer, free (cached)." : "")));
      var budget = {positivesUsed: info.positivesUsed, positivesTotal: info.positivesTotal,
                    epsilonSpent: info.epsilonSpent, epsilonTotal: info.epsilonTotal};
      setMeters(budget);
      lastAnswer = {dataset: set.id, probe: probe, lo: b.lo, hi: b.hi, exists: yes, from: from};
      draw();
      addHistory([n, set.id, probe, range, from === "refused" ? "refused" : yes ? "yes" : "no",
        from + (info.cached ? " (cached)" : ""), (info.positivesTotal - info.positivesUsed) + " of " + info.positivesTotal],
        from === "refused" ? "err" : yes ? "yes" : "no");
    }).catch(function (error) {
      el("status").textContent = "request failed: " + error.message;
    }).finally(function () {
      el("ask").disabled = false;
    });
  }

  el("ask-form").addEventListener("submit", ask);
  el("dataset").addEventListener("change", datasetChanged);
  el("key").addEventListener("change", function () { loadDatasets(); });
  el("probe").addEventListener("input", function () { debounce("suggest", 150, suggest); debounce("curve", 300, loadCurve); });
  el("probe").addEventListener("change", loadCurve);
  ["min", "max"].forEach(function (id) {
    el(id).addEventListener("input", function () { debounce("curve", 250, loadCurve); });
  });
  loadDatasets();
})();
