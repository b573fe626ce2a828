// textgym report: draws the curves and the episode browser from the JSON in #report-data.
// Every value from a run is put on the page as text (textContent / createTextNode) or as an
// SVG attribute that is a number; nothing from the data is ever parsed as HTML.
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("report-data").textContent);
  const SVG = "http://www.w3.org/2000/svg";
  const DASHES = ["", "6 3", "2 3", "8 3 2 3", "1 2"];
  const PAGE = 300; // episodes listed before "show more"

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else node.setAttribute(key, value);
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }
  function svg(tag, attrs) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
    return node;
  }
  function fmt(value, digits) {
    if (value === null || value === undefined || !isFinite(value)) return "–";
    return Number(value).toFixed(digits === undefined ? 3 : digits);
  }
  function cls(text) { return String(text).replace(/[^a-z0-9]+/gi, "-").toLowerCase(); }

  // --- runs ------------------------------------------------------------------------------------
  function drawRuns() {
    const box = document.getElementById("run-list");
    const cards = el("div", { class: "runs" });
    DATA.runs.forEach((run, i) => {
      const card = el("div", { class: "run-card" },
        el("span", { class: "swatch", style: "background:" + run.color }),
        el("b", { text: run.name, title: run.name }), " ", el("span", { class: "badge", text: run.kind }),
        el("div", { class: "meta", text: run.path }));
      if (run.episodes_total > run.episodes_shown) {
        card.appendChild(el("div", { class: "meta",
          text: "episodes: the first " + run.episodes_shown + " of " + run.episodes_total +
            " are embedded (--max-episodes " + DATA.max_episodes + ")" }));
      } else if (run.episodes_total) {
        card.appendChild(el("div", { class: "meta", text: "episodes: " + run.episodes_total }));
      }
      for (const note of run.notes) card.appendChild(el("div", { class: "note", text: note }));
      cards.appendChild(card);
    });
    box.appendChild(cards);
  }

  // --- curves ----------------------------------------------------------------------------------
  // Ticks at round steps (1, 2, 2.5, 5 x 10^k) from at or below lo to at or above hi.
  function niceTicks(lo, hi, count) {
    if (!(hi - lo > 1e-9 * Math.max(1, Math.abs(lo), Math.abs(hi)))) { // equal, up to rounding
      const mid = (lo + hi) / 2; lo = mid - 0.5; hi = mid + 0.5;
    }
    const raw = (hi - lo) / count;
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw * (1 - 1e-9));
    const first = Math.floor(lo / step + 1e-9), last = Math.ceil(hi / step - 1e-9);
    const ticks = [];
    for (let i = first; i <= last; i++) ticks.push(Number((i * step).toPrecision(12)));
    return { lo: ticks[0], hi: ticks[ticks.length - 1], ticks };
  }
  function tickText(t) {
    const a = Math.abs(t);
    return a !== 0 && (a >= 1e4 || a < 1e-3) ? t.toExponential(1) : String(+t.toPrecision(4));
  }

  const MARKERS = ["circle", "square", "triangle", "diamond", "cross"];
  const AXIS_NAMES = { step: "training step", wall: "wall time (s)", tokens: "tokens" };
  const AXES = DATA.runs.map((run) => {
    const maps = {};
    for (const [name, pairs] of Object.entries(run.axes || {})) maps[name] = new Map(pairs);
    return maps;
  });
  // Exponential moving average, debiased as TensorBoard's (weight 0: the values as logged).
  function smooth(values, weight) {
    if (!weight) return values;
    let last = 0, n = 0;
    return values.map((v) => { last = last * weight + (1 - weight) * v; n += 1;
      return last / (1 - Math.pow(weight, n)); });
  }
  // A series' points on the chosen x axis: [x, y, stderr, step]; points off that axis dropped.
  function placed(s, axis, weight) {
    const pts = [];
    for (const p of s.points) {
      const x = axis === "step" ? p[0] : (AXES[s.run][axis] ? AXES[s.run][axis].get(p[0]) : undefined);
      if (x !== undefined && x !== null) pts.push([x, p[1], p[2], p[0]]);
    }
    const ys = smooth(pts.map((p) => p[1]), weight);
    return pts.map((p, i) => [p[0], ys[i], p[2], p[3], p[1]]);
  }
  function marker(kind, x, y, color) {
    const r = 3;
    switch (MARKERS[kind % MARKERS.length]) {
      case "square": return svg("rect", { x: x - r, y: y - r, width: 2 * r, height: 2 * r, fill: color });
      case "triangle": return svg("polygon", { points: [x, y - r - 1, x - r, y + r, x + r, y + r].join(" "), fill: color });
      case "diamond": return svg("polygon", { points: [x, y - r - 1, x + r + 1, y, x, y + r + 1, x - r - 1, y].join(" "), fill: color });
      case "cross": return svg("path", { d: "M" + (x - r) + " " + (y - r) + "L" + (x + r) + " " + (y + r) +
        "M" + (x - r) + " " + (y + r) + "L" + (x + r) + " " + (y - r), stroke: color, "stroke-width": 1.6 });
      default: return svg("circle", { cx: x, cy: y, r: r - 0.4, fill: color });
    }
  }

  function drawChart(spec, axis, weight) {
    const W = 440, H = 230, L = 48, R = 12, T = 10, B = 30;
    const series = spec.series.map((s) => Object.assign({}, s, { placed: placed(s, axis, weight) }))
      .filter((s) => s.placed.length);
    const figure = el("figure", { class: "chart", "data-title": spec.title }, el("h3", { text: spec.title }));
    if (!series.length) {
      figure.appendChild(el("p", { class: "meta", text: "Nothing logged on this x axis." }));
      return figure;
    }
    const pts = series.flatMap((s) => s.placed);
    const lows = pts.map((p) => p[2] === null ? p[1] : p[1] - p[2]);
    const highs = pts.map((p) => p[2] === null ? p[1] : p[1] + p[2]);
    const xs = niceTicks(Math.min(...pts.map((p) => p[0])), Math.max(...pts.map((p) => p[0])), 6);
    let ylo = Math.min(...lows), yhi = Math.max(...highs);
    if (spec.rate) { ylo = Math.min(0, ylo); yhi = Math.max(1, yhi); }
    const ys = niceTicks(ylo, yhi, 5);
    const X = (v) => L + (v - xs.lo) / (xs.hi - xs.lo) * (W - L - R);
    const Y = (v) => T + (1 - (v - ys.lo) / (ys.hi - ys.lo)) * (H - T - B);
    const root = svg("svg", { viewBox: "0 0 " + W + " " + H, role: "img" });
    root.appendChild(svg("title")).textContent = spec.title;
    for (const t of ys.ticks) {
      root.appendChild(svg("line", { x1: L, x2: W - R, y1: Y(t), y2: Y(t), class: "grid" }));
      const label = root.appendChild(svg("text", { x: L - 5, y: Y(t) + 3, "text-anchor": "end" }));
      label.textContent = tickText(t);
    }
    for (const t of xs.ticks) {
      if (axis === "step" && !Number.isInteger(t)) continue;
      const label = root.appendChild(svg("text", { x: X(t), y: H - B + 14, "text-anchor": "middle" }));
      label.textContent = tickText(t);
    }
    root.appendChild(svg("line", { x1: L, x2: L, y1: T, y2: H - B, class: "axis" }));
    root.appendChild(svg("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, class: "axis" }));
    const xlabel = root.appendChild(svg("text", { x: W - R, y: H - 3, "text-anchor": "end", class: "xlabel" }));
    xlabel.textContent = AXIS_NAMES[axis];
    const ylabel = root.appendChild(svg("text", { x: 10, y: T + (H - T - B) / 2,
      transform: "rotate(-90 10 " + (T + (H - T - B) / 2) + ")", "text-anchor": "middle" }));
    ylabel.textContent = spec.ylabel;
    const legend = el("div", { class: "legend" });
    const named = DATA.runs.length > 1;
    for (const s of series) {
      const dash = DASHES[s.dash % DASHES.length];
      root.appendChild(svg("polyline", { fill: "none", stroke: s.color, "stroke-width": 1.8,
        "stroke-dasharray": dash, "data-label": s.label,
        points: s.placed.map((p) => X(p[0]) + "," + Y(p[1])).join(" ") }));
      const name = (named ? DATA.runs[s.run].name + ": " : "") + s.label;
      for (const p of s.placed) {
        if (p[2] !== null && p[2] !== undefined) {
          root.appendChild(svg("line", { x1: X(p[0]), x2: X(p[0]), y1: Y(p[1] - p[2]), y2: Y(p[1] + p[2]),
            stroke: s.color, class: "bar" }));
        }
      }
      if (s.placed.length <= 60) {
        for (const p of s.placed) {
          const dot = root.appendChild(marker(s.marker, X(p[0]), Y(p[1]), s.color));
          dot.appendChild(svg("title")).textContent = name + " · step " + p[3] +
            (axis === "step" ? "" : " · " + AXIS_NAMES[axis] + " " + tickText(p[0])) + ": " + fmt(p[4], 4) +
            (p[2] === null || p[2] === undefined ? "" : " ± " + fmt(p[2], 4) + " (standard error)");
        }
      }
      const key = el("i", { style: "border-color:" + s.color + (dash ? ";border-top-style:dashed" : "") });
      legend.appendChild(el("span", { title: name }, key, name));
    }
    figure.append(root, legend);
    return figure;
  }

  function drawCurves() {
    if (!DATA.charts.length && !DATA.all_zero.length) return;
    document.getElementById("curves-section").hidden = false;
    const box = document.getElementById("curves");
    const axisSelect = document.getElementById("x-axis");
    for (const a of DATA.x_axes) axisSelect.appendChild(el("option", { value: a, text: AXIS_NAMES[a] }));
    const slider = document.getElementById("smooth");
    const redraw = () => {
      const weight = Number(slider.value);
      document.getElementById("smooth-value").textContent = weight ? String(weight) : "0 (none)";
      document.getElementById("x-note").textContent = "x: " + AXIS_NAMES[axisSelect.value];
      box.replaceChildren(...DATA.charts.map((spec) => drawChart(spec, axisSelect.value, weight)));
    };
    axisSelect.addEventListener("change", redraw);
    slider.addEventListener("input", redraw);
    document.getElementById("curve-controls").addEventListener("submit", (ev) => ev.preventDefault());
    redraw();
    const skipped = DATA.runs.filter((r) => r.skipped && r.skipped[0]);
    if (skipped.length) {
      document.getElementById("skipped-note").textContent =
        "A training step whose groups all had equal rewards makes no optimizer update (skipped): " +
        skipped.map((r) => r.name + " skipped " + r.skipped[0] + " of " + r.skipped[1] + " steps").join("; ") + ".";
    }
    if (DATA.not_logged.length) {
      document.getElementById("not-logged").textContent =
        "No finite values logged for: " + DATA.not_logged.join("; ") + ".";
    }
    if (DATA.all_zero.length) {
      document.getElementById("all-zero").textContent =
        "Not drawn, every value logged is 0: " + DATA.all_zero.join("; ") + ".";
    }
  }

  function drawTasks() {
    if (!DATA.tasks.length) return;
    document.getElementById("tasks-section").hidden = false;
    const box = document.getElementById("tasks");
    for (const t of DATA.tasks) {
      const run = DATA.runs[t.run];
      const head = el("tr", {}, el("th", { text: "task" }), el("th", { text: "successes" }),
        el("th", { text: "pass@1" }), t.k > 1 ? el("th", { text: "pass@" + t.k }) : null);
      const body = el("tbody");
      for (const r of t.rows) {
        body.appendChild(el("tr", {}, el("td", { text: r.task, title: r.task }),
          el("td", { text: r.successes + " of " + r.rollouts }),
          el("td", { text: fmt(100 * r["pass@1"], 1) + "%" }),
          t.k > 1 ? el("td", { text: r["pass@k"] === null ? "–" : fmt(100 * r["pass@k"], 1) + "%" }) : null));
      }
      box.appendChild(el("h3", { text: run.name }));
      box.appendChild(el("table", { class: "tasks", "data-run": String(t.run) }, el("thead", {}, head), body));
    }
  }

  // --- episode list ----------------------------------------------------------------------------
  const F = {};
  const manyRuns = new Set(DATA.episodes.map((e) => e.run)).size > 1;
  let matches = [], shown = 0, selected = null;

  function option(select, value, text) { select.appendChild(el("option", { value: value, text: text })); }

  function setupFilters() {
    for (const id of ["run", "outcome", "task", "min", "max", "invalid"]) {
      F[id] = document.getElementById("f-" + id);
    }
    option(F.run, "", "all");
    DATA.runs.forEach((run, i) => { if (run.episodes_shown) option(F.run, String(i), run.name); });
    option(F.outcome, "", "all");
    const outcomes = [...new Set(DATA.episodes.map((e) => e.outcome))].sort();
    for (const o of outcomes) option(F.outcome, o, o);
    const tasks = [...new Set(DATA.episodes.map((e) => e.task).filter((t) => t !== null))];
    const list = document.getElementById("task-ids");
    for (const t of tasks.slice(0, 500)) list.appendChild(el("option", { value: String(t) }));
    const form = document.getElementById("filters");
    form.addEventListener("input", applyFilters);
    form.addEventListener("change", applyFilters);
    form.addEventListener("submit", (ev) => ev.preventDefault());
    document.getElementById("f-reset").addEventListener("click", () => { form.reset(); applyFilters(); });
  }

  function applyFilters() {
    const run = F.run.value, outcome = F.outcome.value, task = F.task.value.trim().toLowerCase();
    const lo = F.min.value === "" ? -Infinity : Number(F.min.value);
    const hi = F.max.value === "" ? Infinity : Number(F.max.value);
    const invalid = F.invalid.value;
    matches = DATA.episodes.filter((e) =>
      (run === "" || String(e.run) === run) &&
      (outcome === "" || e.outcome === outcome) &&
      (task === "" || String(e.task).toLowerCase().includes(task)) &&
      (e.return === null ? lo === -Infinity && hi === Infinity : e.return >= lo && e.return <= hi) &&
      (invalid === "" || (invalid === "some" ? e.invalid > 0 : !e.invalid)));
    document.getElementById("f-count").textContent =
      matches.length + " of " + DATA.episodes.length + " episodes";
    shown = 0;
    const box = document.getElementById("episode-list");
    box.replaceChildren();
    const columns = [["#", "c-idx"], ["run", "c-run"], ["task", "c-task"], ["outcome", "c-outcome"],
      ["return", "c-num"], ["turns", "c-num"]].filter((c) => c[0] !== "run" || manyRuns);
    const head = el("tr", {}, ...columns.map((c) => el("th", { class: c[1], text: c[0] })));
    const table = el("table", {}, el("thead", {}, head), el("tbody"));
    box.appendChild(table);
    showMore();
  }

  function showMore() {
    const box = document.getElementById("episode-list");
    const body = box.querySelector("tbody");
    const old = box.querySelector("button.more");
    if (old) old.remove();
    for (const e of matches.slice(shown, shown + PAGE)) {
      const outcome = el("td", {}, el("span", { class: "badge " + cls(e.outcome), text: e.outcome }));
      if (e.invalid) outcome.append(" ", el("span", { class: "badge invalid", text: e.invalid + " invalid" }));
      const row = el("tr", { class: "ep", tabindex: "0", "data-key": e.run + ":" + e.index },
        el("td", { class: "num", text: String(e.index) }),
        manyRuns ? el("td", { class: "run", text: DATA.runs[e.run].name, title: DATA.runs[e.run].name }) : null,
        el("td", { class: "task", text: e.task === null ? "–" : String(e.task), title: String(e.task) }),
        outcome,
        el("td", { class: "num", text: fmt(e.return) }),
        el("td", { class: "num", text: e.steps === null ? "–" : String(e.steps) }));
      if (selected === e) row.classList.add("selected");
      row.addEventListener("click", () => openEpisode(e, row));
      row.addEventListener("keydown", (ev) => { if (ev.key === "Enter") openEpisode(e, row); });
      body.appendChild(row);
    }
    shown = Math.min(matches.length, shown + PAGE);
    if (shown < matches.length) {
      const more = el("button", { class: "more", type: "button",
        text: "show " + Math.min(PAGE, matches.length - shown) + " more (" + (matches.length - shown) + " left)" });
      more.addEventListener("click", showMore);
      box.appendChild(more);
    }
  }

  // --- one episode -----------------------------------------------------------------------------
  function drawSegment(seg) {
    switch (seg.t) {
      case "think": return el("pre", { class: "think", text: seg.v });
      case "call": {
        const head = seg.ok ? el("div", {}, "tool call ", el("b", { text: seg.name }))
          : el("div", { text: "tool call (not valid JSON: shown as written)" });
        return el("div", { class: "call" + (seg.ok ? "" : " bad") }, head, el("pre", { text: seg.v }));
      }
      case "result":
        return el("div", { class: "result" }, el("div", { text: "tool response" }), el("pre", { text: seg.v }));
      case "board": {
        const board = el("div", { class: "board", role: "img", "aria-label": "tic-tac-toe board" });
        seg.cells.forEach((c, i) => board.appendChild(
          el("span", { class: c ? c : "empty", text: c ? c : String(i) })));
        return board;
      }
      default: return el("pre", { text: seg.v });
    }
  }

  function drawStep(info, number) {
    const parts = [el("b", { text: "step " + number }), " · reward " + fmt(info.reward)];
    for (const [name, value] of Object.entries(info.components || {})) {
      parts.push(" · " + name + " " + fmt(value));
    }
    const box = el("div", { class: "step" }, ...parts);
    if (info.invalid) box.append(" ", el("span", { class: "badge invalid", text: "invalid action" }));
    if (info.finish === "length") box.append(" ", el("span", { class: "badge", text: "cut at token limit" }));
    return box;
  }

  function openEpisode(e, row) {
    selected = e;
    for (const r of document.querySelectorAll("#episode-list tr.selected")) r.classList.remove("selected");
    if (row) row.classList.add("selected");
    history.replaceState(null, "", "#episode=" + e.run + ":" + e.index);
    const view = document.getElementById("episode-view");
    view.replaceChildren();
    const run = DATA.runs[e.run];
    view.appendChild(el("h3", { text: "Episode " + e.index + " of " + run.name }));
    const facts = el("div", { class: "facts" });
    const fact = (name, value) => facts.appendChild(el("span", {}, name + " ", el("b", { text: value })));
    fact("task", e.task === null ? "–" : String(e.task));
    fact("seed", e.seed === null ? "–" : String(e.seed));
    fact("env", e.env === null ? "–" : String(e.env));
    fact("return", fmt(e.return));
    fact("turns", e.steps === null ? "–" : String(e.steps));
    facts.appendChild(el("span", { class: "badge " + cls(e.outcome), text: e.outcome }));
    if (e.invalid) facts.appendChild(el("span", { class: "badge invalid", text: e.invalid + " invalid" }));
    view.appendChild(facts);
    const names = Object.keys(e.totals);
    if (names.length) {
      const table = el("table", { class: "totals" },
        el("tr", {}, el("th", { text: "reward component" }), ...names.map((n) => el("th", { text: n }))),
        el("tr", {}, el("td", { text: "episode total" }), ...names.map((n) => el("td", { text: fmt(e.totals[n]) }))));
      view.appendChild(table);
    }
    if (e.system >= 0) {
      const box = el("details", {}, el("summary", { text: "system prompt" }));
      for (const seg of DATA.shared[e.system].segments) box.appendChild(drawSegment(seg));
      view.appendChild(box);
    }
    if (e.tools >= 0) {
      view.appendChild(el("details", {}, el("summary", { text: "tools offered" }),
        el("pre", { text: DATA.shared[e.tools] })));
    }
    let step = 0;
    for (const msg of e.messages) {
      const box = el("div", { class: "msg " + cls(msg.role) }, el("div", { class: "role", text: msg.role }));
      for (const seg of msg.segments) box.appendChild(drawSegment(seg));
      if (msg.role === "assistant") {
        if (e.step_info && step < e.step_info.length) box.appendChild(drawStep(e.step_info[step], step + 1));
        step += 1;
      }
      view.appendChild(box);
    }
    if (!e.step_info) {
      view.appendChild(el("p", { class: "meta",
        text: "Per-step rewards are not in collect records; the totals above are the episode's." }));
    }
  }

  function openFromHash() {
    const m = /^#episode=(\d+):(\d+)$/.exec(location.hash);
    if (!m) return;
    const e = DATA.episodes.find((x) => x.run === Number(m[1]) && x.index === Number(m[2]));
    if (e) openEpisode(e, document.querySelector('#episode-list tr[data-key="' + m[1] + ":" + m[2] + '"]'));
  }

  drawRuns();
  drawCurves();
  drawTasks();
  if (DATA.episodes.length) {
    document.getElementById("episodes-section").hidden = false;
    const capped = DATA.runs.filter((r) => r.episodes_total > r.episodes_shown);
    if (capped.length) {
      document.getElementById("episode-cap").textContent = "Only the first " + DATA.max_episodes +
        " episodes of each run are embedded (--max-episodes); cut: " +
        capped.map((r) => r.name + " (" + r.episodes_shown + " of " + r.episodes_total + ")").join(", ") + ".";
    }
    setupFilters();
    applyFilters();
    openFromHash();
  }
})();
