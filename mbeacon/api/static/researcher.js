
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
  var answered = {};      // "dataset probe lo hi" -> {yes, from}: the answers marked on the curve
  var shownProbe = "";    // the probe whose prior is drawn after a gene or region answer ("": the typed one)
  var genesOf = null;     // the genes the beacon knows (/filtering_terms), loaded on first use
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
  // "1 patient", "2 patients", "1,234 probes"
  function count(n, one, many) {
    return Number(n).toLocaleString("en") + " " + (Number(n) === 1 ? one : (many || one + "s"));
  }
  function mode() { return document.querySelector("input[name=by]:checked").value; }
  function answerKey(dataset, probe, lo, hi) { return [dataset, probe, lo, hi].join(" "); }
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
        var label = d.name && d.name !== d.id ? d.id + " \u2014 " + d.name : d.id;
        select.appendChild(new Option(label, d.id));
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
    note.textContent = count(d.info.patients, "patient") + ", " + count(d.info.probes, "probe") +
      ". A yes means at least " + count(p.threshold || 1, "patient") + " in the range.";
    var left = document.createElement("span");
    left.id = "answers-left";
    note.appendChild(document.createTextNode(" "));
    note.appendChild(left);
    genesOf = null;
    if (mode() === "gene") loadGenes();
    loadBudget();
    if (!el("probe").value.trim()) {
      suggest().then(function (ids) { if (ids.length && !el("probe").value.trim()) { el("probe").value = ids[0]; loadCurve(); } });
    } else {
      loadCurve();
    }
  }

  function setMeters(b) {
    var left = el("answers-left");
    if (left) {
      left.textContent = b ? "You may get " + count(b.positivesTotal - b.positivesUsed, "more answer") +
        " from the data." : "";
    }
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

  function loadGenes() {
    if (genesOf) return;
    genesOf = [];
    get("/filtering_terms", {limit: 1000}).then(function (res) {
      var list = el("gene-list");
      list.replaceChildren();
      var terms = res.ok && res.body.response ? res.body.response.filteringTerms || [] : [];
      terms.forEach(function (t) {
        if (String(t.id).indexOf("geneId:") !== 0) return;
        var o = document.createElement("option");
        o.value = t.id.slice(7);
        list.appendChild(o);
      });
    });
  }

  function modeChanged() {
    var by = mode();
    document.querySelectorAll(".by").forEach(function (n) { n.hidden = !n.classList.contains("by-" + by); });
    if (by === "gene") loadGenes();
    if (by === "probe") { shownProbe = ""; loadCurve(); }
  }

  // The probe whose prior is drawn: the typed probe, or the one picked from a gene or region answer.
  function curveProbe() { return mode() === "probe" ? el("probe").value.trim() : shownProbe; }

  function loadCurve() {
    clearTimeout(timers.curve);
    var dataset = el("dataset").value, probe = curveProbe();
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

  // A step of 1, 2 or 5 times a power of ten near ``raw``: ticks a reader can add up.
  function niceStep(raw) {
    var power = Math.pow(10, Math.floor(Math.log10(raw)));
    var f = raw / power;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * power;
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
    var step = niceStep(Math.max.apply(null, dens.concat([1])) / 4);
    var top = Math.max.apply(null, dens.concat([1])) * 1.08;
    var x = function (v) { return L + v * (W - L - R); };
    var y = function (v) { return H - B - (v / top) * (H - T - B); };
    var range = curve.range;
    var lo = range ? range.minValue : 0, hi = range ? range.maxValue : 0;
    var marked = range ? answered[answerKey(curve.datasetId, curve.probeId, lo, hi)] || null : null;
    for (var v = step; v < top; v += step) {  // the density scale: gridlines and their values
      svg.appendChild(node("line", {"class": "gridline", x1: L, y1: y(v), x2: W - R, y2: y(v)}));
      svg.appendChild(node("text", {"class": "tick", x: L - 5, y: y(v) + 4, "text-anchor": "end"}, short(v)));
    }
    svg.appendChild(node("text", {"class": "tick", x: L - 5, y: H - B + 4, "text-anchor": "end"}, "0"));
    var state = marked ? (marked.yes ? "yes" : "no") : "asked";
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
    svg.appendChild(node("text", {"class": "tick", x: 11, y: (T + H - B) / 2, "text-anchor": "middle",
      transform: "rotate(-90 11 " + (T + H - B) / 2 + ")"}, "prior density"));
    if (!range) return;
    var label = marked ? (marked.yes ? "\u2714 yes" : "\u2718 no") + " \u00b7 from the " + marked.from
      : "asked: " + fmt(lo) + "\u2013" + fmt(hi);
    var mid = Math.min(Math.max(x((lo + hi) / 2), L + 50), W - R - 50);
    svg.appendChild(node("text", {"class": "mark " + state, x: mid, y: T - 12, "text-anchor": "middle"}, label));
    var model = curve.model === "uniform" ? "uniform (the prior does not know this probe)" :
      "prior \u201c" + curve.prior + "\u201d (" + curve.model + "): mean " + fmt(curve.mean) + ", sd " + fmt(curve.sd);
    el("chart-caption").textContent = "The public " + model + ". In [" + fmt(lo) + ", " + fmt(hi) +
      "] it expects " + fmt(curve.range.expectedPatients, 1) + " of " + count(curve.patients, "patient") + " (" +
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

  // The question in the form: its request parameters and how it is named in the page.
  function question() {
    var by = mode();
    if (by === "gene") {
      var gene = el("gene").value.trim();
      return {params: {geneId: gene}, name: "gene " + gene, missing: gene ? "" : "type a gene symbol"};
    }
    if (by === "region") {
      var chrom = el("chromosome").value.trim(), start = el("start").value.trim(), end = el("end").value.trim();
      var params = {referenceName: chrom, start: start};
      if (end) params.end = end;
      return {params: params, name: chrom + ":" + start + (end ? "-" + end : ""),
              missing: chrom && start ? "" : "give a chromosome and a start"};
    }
    var probe = el("probe").value.trim();
    return {params: {probeId: probe}, name: probe, missing: probe ? "" : "type a probe id"};
  }

  // Where a gene's or region's answers came from, without "0 answers": "all 4 answers from the prior",
  // "1 answer from the data, 3 from the prior", "both answers from the data".
  function perProbeSource(fromData, total) {
    var fromPrior = total - fromData;
    if (!fromData || !fromPrior) {
      var all = total === 1 ? "the answer" : total === 2 ? "both answers" : "all " + count(total, "answer");
      return all + " from the " + (fromData ? "data" : "prior");
    }
    return count(fromData, "answer") + " from the data, " + fromPrior + " from the prior";
  }

  function verdictOf(set) {
    var from = (set.info || {}).answeredFrom;
    return {from: from, yes: !!set.exists && from !== "refused"};
  }

  function showProbe(probe) {
    shownProbe = probe;
    el("per-probe").querySelectorAll("tbody tr").forEach(function (row) {
      row.classList.toggle("shown", row.dataset.probe === probe);
    });
    loadCurve();
  }

  function listProbes(sets) {
    var box = el("per-probe"), body = box.querySelector("tbody");
    body.replaceChildren();
    box.hidden = sets.length === 0;
    sets.forEach(function (set) {
      var v = verdictOf(set), probe = set.info.probeId;
      var row = document.createElement("tr");
      row.dataset.probe = probe;
      var cell = document.createElement("td");
      var button = document.createElement("button");
      button.type = "button";
      button.className = "link";
      button.textContent = probe;
      button.title = "show the prior at " + probe;
      button.addEventListener("click", function () { showProbe(probe); });
      cell.appendChild(button);
      row.appendChild(cell);
      var word = document.createElement("td");
      word.textContent = v.from === "refused" ? "refused" : v.yes ? "yes" : "no";
      word.className = v.from === "refused" ? "" : v.yes ? "yes" : "no";
      row.appendChild(word);
      var from = document.createElement("td");
      from.textContent = v.from + (set.info.cached ? " (cached)" : "");
      row.appendChild(from);
      body.appendChild(row);
    });
  }

  function ask(event) {
    event.preventDefault();
    var dataset = el("dataset").value, b = bounds(), q = question();
    if (q.missing) { el("status").textContent = q.missing; return; }
    var params = Object.assign({}, q.params, {includeResultsetResponses: "ALL"});
    if (dataset) params.datasetIds = dataset;
    if (b.loText !== "") params.minValue = b.loText;
    if (b.hiText !== "") params.maxValue = b.hiText;
    var range = (b.loText || "0") + "\u2013" + (b.hiText || "1");
    var byProbe = mode() === "probe";
    el("ask").disabled = true;
    el("status").textContent = "asking\u2026";
    if (byProbe) loadCurve();  // the chart shows the question being asked, not one typed a moment ago
    asked += 1;
    var n = asked;
    get("/methylation", params).then(function (res) {
      el("status").textContent = "HTTP " + res.status;
      if (!res.ok) {
        showError(res);
        if (res.status === 429 && res.body && res.body.info) setMeters(res.body.info);
        addHistory([n, dataset, q.name, range, "refused (HTTP " + res.status + "): " + errorText(res), "", ""], "err");
        return;
      }
      var all = (res.body.response && res.body.response.resultSets) || [];
      var sets = all.filter(function (s) { return s.id === dataset; });
      if (!sets.length) sets = all.slice(0, 1);
      if (!sets.length) { showError({status: res.status, body: null, text: "the answer lists no dataset"}); return; }
      var id = sets[0].id;
      var verdicts = sets.map(verdictOf);
      var yes = verdicts.filter(function (v) { return v.yes; }).length;
      var refused = verdicts.every(function (v) { return v.from === "refused"; });
      var fromData = verdicts.filter(function (v) { return v.from === "data"; }).length;
      var cached = sets.every(function (s) { return s.info && s.info.cached; });
      sets.forEach(function (s, i) {
        answered[answerKey(id, s.info.probeId, b.lo, b.hi)] = verdicts[i];
      });
      el("error").hidden = true;
      var box = el("answer");
      box.hidden = false;
      box.className = "answer " + (refused ? "" : yes ? "yes" : "no");
      el("answer-word").textContent = refused ? "Refused" : yes ? "Yes" : "No";
      var threshold = ((datasets[id] || {info: {privacy: {}}}).info.privacy.threshold) || 1;
      var where = " in [" + range.replace("\u2013", ", ") + "]";
      var detail;
      if (refused) {
        detail = "your budget on this dataset is exhausted";
      } else if (byProbe) {
        detail = (yes ? "at least " + count(threshold, "patient") + (threshold === 1 ? " has " : " have ")
          : (threshold === 1 ? "no patient has " : "fewer than " + count(threshold, "patient") + " have ")) +
          q.name + where;
      } else {
        detail = "at least " + count(threshold, "patient") + where + " at " + yes + " of " +
          count(sets.length, "probe") + " of " + q.name;
      }
      el("answer-detail").textContent = detail;
      var source = el("answer-source");
      source.replaceChildren();
      var badge = document.createElement("span");
      var from = byProbe ? verdicts[0].from : fromData ? "data" : refused ? "refused" : "prior";
      badge.className = "badge " + from;
      badge.textContent = byProbe ? "answered from the " + from : perProbeSource(fromData, sets.length);
      source.appendChild(badge);
      var why = byProbe ? ({prior: " \u2014 the public prior's answer; free.",
                           data: " \u2014 the data disagree with the prior; this spent one positive.",
                           refused: " \u2014 not answered."}[from] || "")
        : fromData ? " \u2014 each answer from the data spent one positive." : " \u2014 free.";
      source.appendChild(document.createTextNode(why + (cached ? " Asked before: the same answer, free (cached)." : "")));
      var info = sets[sets.length - 1].info || {};  // the budget after the whole request
      setMeters({positivesUsed: info.positivesUsed, positivesTotal: info.positivesTotal,
                 epsilonSpent: info.epsilonSpent, epsilonTotal: info.epsilonTotal});
      if (byProbe) {
        el("per-probe").hidden = true;
        draw();
      } else {
        listProbes(sets);
        var first = sets.filter(function (s, i) { return verdicts[i].yes; })[0] || sets[0];
        showProbe(first.info.probeId);
      }
      var answer = refused ? "refused" : byProbe ? (yes ? "yes" : "no") :
        yes ? "yes at " + yes + " of " + count(sets.length, "probe") : "no (" + count(sets.length, "probe") + ")";
      addHistory([n, id, q.name, range, answer, byProbe ? from + (cached ? " (cached)" : "") :
        fromData + " data, " + (sets.length - fromData) + " prior",
        (info.positivesTotal - info.positivesUsed) + " of " + info.positivesTotal],
        refused ? "err" : yes ? "yes" : "no");
    }).catch(function (error) {
      el("status").textContent = "request failed: " + error.message;
    }).finally(function () {
      el("ask").disabled = false;
    });
  }

  el("ask-form").addEventListener("submit", ask);
  document.querySelectorAll("input[name=by]").forEach(function (r) { r.addEventListener("change", modeChanged); });
  el("dataset").addEventListener("change", datasetChanged);
  el("key").addEventListener("change", function () { loadDatasets(); });
  el("probe").addEventListener("input", function () { debounce("suggest", 150, suggest); debounce("curve", 300, loadCurve); });
  el("probe").addEventListener("change", loadCurve);
  ["min", "max"].forEach(function (id) {
    el(id).addEventListener("input", function () { debounce("curve", 250, loadCurve); });
  });
  loadDatasets();
})();
