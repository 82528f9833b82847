// TraceView's gradient plot, for a trace recorded with backward=True (joined in front of trace_view.js, which
// mounts it under the tree, see assets.py). The kernel sends what to draw as JSON in the `gradients` trait
// (nbtrace/notebook/gradient_plot.py): panels of series over the layers, each point with the payload row of its
// call. Drawn as plain SVG on a log scale; a click on a point selects its call (the view's own select), and the
// point of the selected call is ringed. No dependencies, no words of its own.

const GP = { w: 460, h: 190, left: 52, right: 10, top: 10, bottom: 34 };
const SVG_NS = "http://www.w3.org/2000/svg";

/** The nearest of 1, 2, 5 times a power of ten at or below (`up`: at or above) `v`. */
function nice(v, up) {
  const e = Math.floor(Math.log10(v));
  const steps = up ? [1, 2, 5, 10] : [10, 5, 2, 1];
  for (const m of steps) {
    const t = m * 10 ** e;
    if (up ? t >= v * (1 - 1e-9) : t <= v * (1 + 1e-9)) return t;
  }
  return 10 ** e;
}

/** A log axis around [lo, hi] (a little wider, so no point sits on its edge): its ends, 1-2-5 numbers, and the
 * ticks between (1, 2, 5 times each power of ten within two decades, else the powers of ten). */
export function logTicks(lo, hi) {
  const a = nice(lo / 1.25, false);
  const b = Math.max(nice(hi * 1.25, true), nice(a * 1.01, true));
  const ticks = [];
  const dense = Math.log10(b / a) <= 2;
  const step = Math.max(1, Math.ceil(Math.log10(b / a) / 6));
  for (let e = Math.floor(Math.log10(a)); e <= Math.ceil(Math.log10(b)); e += dense ? 1 : step) {
    for (const m of dense ? [1, 2, 5] : [1]) {
      const t = m * 10 ** e;
      if (t >= a * (1 - 1e-9) && t <= b * (1 + 1e-9)) ticks.push(t);
    }
  }
  return { lo: a, hi: b, ticks };
}

/** A series' points split where layers are missing between them (pruned from the files): one polyline each. */
export function segments(points) {
  const out = [];
  let run = [];
  for (const point of points) {
    if (run.length && point[0] - run[run.length - 1][0] > 1) { out.push(run); run = []; }
    run.push(point);
  }
  if (run.length) out.push(run);
  return out;
}

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

function tickText(v) {
  const e = Math.round(Math.log10(v));
  return Math.abs(v - 10 ** e) < 1e-9 * v ? (Math.abs(e) <= 2 ? String(10 ** e) : `1e${e}`) : String(+v.toPrecision(1));
}

/** One panel: axes, every series of it, its points (with their rows) and a legend. */
function panel(plot, name, onPick, onHover) {
  const series = plot.series.filter((s) => s.panel === name);
  if (!series.length) return null;
  const values = series.flatMap((s) => s.points.map((q) => q[1]));
  if (!values.length) values.push(1); // only NaN/inf points: an axis around 1
  const xs = plot.ticks.map((t) => t[0]).concat(series.flatMap((s) => s.points.map((q) => q[0])));
  const { lo, hi, ticks } = logTicks(Math.min(...values), Math.max(...values));
  const x0 = Math.min(...xs) - 0.3; // no point on the axis
  const x1 = Math.max(Math.min(...xs) + 1, Math.max(...xs)) + 0.3;
  const W = GP.w - GP.left - GP.right;
  const H = GP.h - GP.top - GP.bottom;
  const X = (x) => GP.left + ((x - x0) / (x1 - x0)) * W;
  const Y = (y) => GP.top + (1 - (Math.log10(y) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo))) * H;
  const box = document.createElement("figure");
  box.className = `nbt-gp-panel nbt-gp-${name}`;
  const chart = svg("svg", { viewBox: `0 0 ${GP.w} ${GP.h}`, role: "img", "aria-label": plot.words[name] });
  chart.classList.add("nbt-gp-svg");
  for (const v of ticks) {
    chart.append(svg("line", { x1: GP.left, x2: GP.left + W, y1: Y(v), y2: Y(v), class: "nbt-gp-grid" }),
      svg("text", { x: GP.left - 4, y: Y(v) + 3, class: "nbt-gp-ytick" }, tickText(v)));
  }
  const every = Math.max(1, Math.ceil(plot.ticks.length / 16));
  plot.ticks.forEach(([x, label], k) => {
    if (k % every === 0) chart.append(svg("text", { x: X(x), y: GP.top + H + 13, class: "nbt-gp-xtick" }, label));
  });
  for (const [first, last, stack] of plot.stacks) {
    chart.append(svg("text", { x: (X(first) + X(last)) / 2, y: GP.top + H + 25, class: "nbt-gp-stack" }, stack));
  }
  chart.append(svg("line", { x1: GP.left, x2: GP.left, y1: GP.top, y2: GP.top + H, class: "nbt-gp-axis" }),
    svg("line", { x1: GP.left, x2: GP.left + W, y1: GP.top + H, y2: GP.top + H, class: "nbt-gp-axis" }));
  if (!plot.stacks.length) {
    chart.append(svg("text", { x: GP.left + W / 2, y: GP.top + H + 27, class: "nbt-gp-stack" }, plot.words.x));
  }
  const v = plot.verdict;
  if (v && name === "backward" && v.x !== null && v.x !== undefined) { // where a comparison's backward parts ways
    const mark = svg("line", { x1: X(v.x), x2: X(v.x), y1: GP.top, y2: GP.top + H, class: `nbt-gp-vmark nbt-gp-v-${v.state}` });
    mark.append(svg("title", {}, v.text));
    chart.append(mark);
  }
  for (const s of series) {
    const cls = `nbt-gp-${s.kind} nbt-gp-side-${s.side}`;
    for (const run of segments(s.points)) {
      chart.append(svg("polyline", { points: run.map((q) => `${X(q[0])},${Y(q[1])}`).join(" "), class: `nbt-gp-line ${cls}` }));
    }
    for (const [x, row, path, tip] of s.nonfinite || []) { // a gradient that holds a NaN or inf: at the top edge
      const y = GP.top + 4;
      const mark = svg("path", { d: `M${X(x) - 5},${y - 4} L${X(x) + 5},${y - 4} L${X(x)},${y + 5} Z`,
        class: `nbt-gp-nan nbt-gp-${s.kind} nbt-gp-side-${s.side}`, "data-row": row, "data-path": path, "data-kind": s.kind,
        "data-side": s.side });
      mark.append(svg("title", {}, tip));
      mark.addEventListener("click", () => { if (row >= 0) onPick(row); });
      mark.addEventListener("mouseenter", () => onHover(tip));
      mark.addEventListener("mouseleave", () => onHover(""));
      chart.append(mark);
    }
    for (const [x, y, row, path, tip] of s.points) {
      const dot = svg("circle", { cx: X(x), cy: Y(y), r: 3.5, class: `nbt-gp-pt ${cls}`, "data-row": row, "data-path": path,
        "data-kind": s.kind, "data-side": s.side });
      if (row < 0) dot.classList.add("nbt-gp-nopick");
      dot.append(svg("title", {}, tip));
      dot.addEventListener("click", () => { if (row >= 0) onPick(row); });
      dot.addEventListener("mouseenter", () => onHover(tip));
      dot.addEventListener("mouseleave", () => onHover(""));
      chart.append(dot);
    }
  }
  const caption = document.createElement("figcaption");
  caption.className = "nbt-gp-caption";
  caption.append(document.createTextNode(plot.words[name]));
  const legend = document.createElement("div");
  legend.className = "nbt-gp-legend";
  for (const s of series) {
    const key = document.createElement("span");
    key.className = `nbt-gp-key nbt-gp-${s.kind} nbt-gp-side-${s.side}`;
    const swatch = svg("svg", { width: 22, height: 8 });
    swatch.append(svg("line", { x1: 1, x2: 21, y1: 4, y2: 4, class: `nbt-gp-line nbt-gp-${s.kind} nbt-gp-side-${s.side}` }));
    key.append(swatch, document.createTextNode(s.name));
    legend.append(key);
  }
  box.append(caption, chart, legend);
  return box;
}

/** A call's forward and backward side by side in its detail pane, and the gradients of the parameters under it
 * (nbtrace/notebook/backward_detail.py sends the rows, in words). */
function backwardTable(b) {
  const box = document.createElement("div");
  box.className = "nbt-d-backward";
  const head = document.createElement("div");
  head.className = "nbt-d-k";
  head.textContent = b.words.heading;
  const table = document.createElement("table");
  table.className = "nbt-fb-table";
  const line = (cells, tag, cls) => {
    const tr = document.createElement("tr");
    if (cls) tr.className = cls;
    for (const text of cells) {
      const cell = document.createElement(tag);
      cell.textContent = text;
      tr.append(cell);
    }
    table.append(tr);
  };
  line(b.words.columns, "th");
  for (const row of b.rows) line(row, "td", "nbt-fb-row");
  box.append(head, table);
  if (b.parameters.length) {
    const params = document.createElement("details");
    params.className = "nbt-fb-params";
    const summary = document.createElement("summary");
    summary.textContent = b.words.parameters;
    const list = document.createElement("table");
    list.className = "nbt-fb-table";
    if (b.words.parameter_columns) { // a comparison: b's beside a's
      const tr = document.createElement("tr");
      for (const text of b.words.parameter_columns) tr.append(Object.assign(document.createElement("th"), { textContent: text }));
      list.append(tr);
    }
    for (const cells of b.parameters) {
      const tr = document.createElement("tr");
      tr.className = "nbt-fb-param";
      for (const text of cells) {
        const cell = document.createElement("td");
        cell.textContent = text;
        tr.append(cell);
      }
      list.append(tr);
    }
    params.append(summary, list);
    if (b.words.more) params.append(Object.assign(document.createElement("div"), { className: "nbt-hint", textContent: b.words.more }));
    box.append(params);
  }
  return box;
}

/** A comparison's backward verdict over the plot, with a button to the module it names. */
function verdictLine(v, go, select) {
  const line = document.createElement("div");
  line.className = `nbt-gp-verdict nbt-gp-v-${v.state}`;
  const mark = document.createElement("span");
  mark.className = "nbt-gp-vword";
  mark.textContent = v.mark;
  line.append(mark, document.createTextNode(` ${v.text}`));
  if (v.row >= 0) {
    const button = document.createElement("button");
    button.className = "nbt-chip nbt-gp-go";
    button.textContent = `${go} ${v.path.split(".").slice(1).join(".") || v.path} ↧`;
    button.addEventListener("click", () => select(v.row));
    line.append(" ", button);
  }
  return line;
}

/** Mount the plot into `host` (a <details> the view gives it): drawn from the `gradients` trait, hidden without
 * one; `select(row)` is the view's selection. Returns the function that unmounts it. */
function mountGradientPlot(host, model, select) {
  const readout = document.createElement("span");
  readout.className = "nbt-gp-readout";
  const mark = () => {
    const row = model.get("selected_row");
    for (const dot of host.querySelectorAll(".nbt-gp-pt, .nbt-gp-nan")) dot.classList.toggle("nbt-gp-on", row >= 0 && Number(dot.dataset.row) === row);
  };
  const draw = () => {
    const raw = model.get("gradients") || "";
    const plot = raw ? (typeof raw === "string" ? JSON.parse(raw) : raw) : null;
    if (!plot || !plot.series || !plot.series.length) { host.hidden = true; host.replaceChildren(); return; }
    host.hidden = false;
    const summary = document.createElement("summary");
    summary.className = "nbt-gp-summary";
    summary.append(document.createTextNode(`${plot.words.title} · ${plot.words.pass}`), readout);
    const panels = document.createElement("div");
    panels.className = "nbt-gp-panels";
    const hint = document.createElement("span");
    hint.className = "nbt-gp-hint";
    hint.textContent = plot.words.hint;
    readout.textContent = "";
    readout.append(hint);
    const hover = (tip) => { readout.textContent = tip; if (!tip) readout.append(hint); };
    for (const name of ["backward", "forward"]) {
      const made = panel(plot, name, select, hover);
      if (made) panels.append(made);
    }
    const parts = [summary];
    if (plot.verdict) parts.push(verdictLine(plot.verdict, plot.words.go, select));
    host.replaceChildren(...parts, panels);
    mark();
  };
  model.on("change:gradients", draw);
  model.on("change:selected_row", mark);
  draw();
  return () => {
    model.off("change:gradients", draw);
    model.off("change:selected_row", mark);
  };
}
