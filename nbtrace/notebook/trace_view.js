// TraceView front end: a virtualized call tree of an nbtrace Trace.
// A plain ES module for anywidget (no build step, no dependencies). The kernel sends one
// columnar payload (see nbtrace/notebook/payload.py); a row's details are asked for with
// model.send({type: "detail", row}) and arrive as a custom message.

export const ROW_H = 22;
const OVERSCAN = 10;

export const F = {
  NONFINITE: 1, ERROR: 2, GAP: 4, MORE_OUTPUTS: 8, JUMP_SMALL: 16, JUMP_BIG: 32,
  NAN_BELOW: 64, ERROR_BELOW: 128, FIRST_NONFINITE: 256, ABSOLUTE: 512, JUMP_UP: 1024,
};
// Status names and their words come with the payload (nbtrace/render/vocabulary.py): one vocabulary.

// ---------------------------------------------------------------------------- pure helpers

/** A compact number: 0.012, 1.03, 6.91e-4; "nan"/"inf" pass through; "" when missing. */
export function formatNumber(v) {
  if (v === null || v === undefined) return "";
  if (typeof v === "string") return v;
  if (v === 0) return "0";
  const a = Math.abs(v);
  if (a >= 100 && a < 1e4) return v.toFixed(0);
  if (a >= 1 && a < 100) return v.toPrecision(3); // keeps trailing zeros: 1.00, 12.0
  if (a >= 1e-3 && a < 1) return v.toFixed(3);
  return v.toExponential(2);
}

/** Parents, children, subtree ends and full paths, from the payload's depth column. */
export function buildTree(p) {
  const n = p.depth.length;
  const parent = new Int32Array(n);
  const end = new Int32Array(n); // first row after this row's subtree
  const children = new Array(n);
  const path = new Array(n);
  const name = new Array(n);
  const calls = new Map(p.calls.map(([row, k, total]) => [row, [k, total]]));
  const callsBefore = new Int32Array(n + 1); // calls (not marker rows) among rows < i
  const stack = []; // rows on the current path, by depth
  const open = []; // rows whose subtree is still open
  for (let i = 0; i < n; i++) {
    const d = p.depth[i];
    callsBefore[i + 1] = callsBefore[i] + (p.flags[i] & F.GAP ? 0 : 1);
    while (open.length && p.depth[open[open.length - 1]] >= d) end[open.pop()] = i;
    open.push(i);
    stack.length = d;
    const up = d > 0 ? stack[d - 1] : -1;
    parent[i] = up === undefined ? -1 : up;
    children[i] = null;
    if (parent[i] >= 0) (children[parent[i]] ||= []).push(i);
    const seg = p.strings[p.seg[i]];
    const flags = p.flags[i];
    if (flags & F.GAP) {
      path[i] = "";
      name[i] = seg;
      continue; // a marker row never has children
    }
    if (parent[i] < 0) {
      path[i] = seg;
      name[i] = seg;
    } else if (flags & F.ABSOLUTE) {
      path[i] = seg;
      const root = path[0] + ".";
      name[i] = seg.startsWith(root) ? seg.slice(root.length) : seg;
    } else {
      path[i] = path[parent[i]] + "." + seg;
      name[i] = seg;
    }
    stack[d] = i;
  }
  while (open.length) end[open.pop()] = n;
  const below = (i) => callsBefore[end[i]] - callsBefore[i + 1]; // calls inside row i's subtree
  const lower = path.map((s) => s.toLowerCase());
  return { n, parent, end, children, path, name, lower, calls, below };
}

/** Rows the filter keeps: matching paths (case-insensitive substring) and their ancestors. */
export function filterRows(tree, text) {
  const needle = text.trim().toLowerCase();
  if (!needle) return null;
  const keep = new Uint8Array(tree.n); // 2: the path matches; 1: an ancestor of a match
  let matches = 0;
  for (let i = 0; i < tree.n; i++) {
    if (tree.path[i] && tree.lower[i].includes(needle)) { keep[i] = 2; matches++; }
  }
  for (let i = 0; i < tree.n; i++) {
    if (keep[i] !== 2) continue;
    for (let j = tree.parent[i]; j >= 0 && keep[j] === 0; j = tree.parent[j]) keep[j] = 1;
  }
  return { keep, matches };
}

/** The rows on screen, in order: expanded subtrees, or every kept row while filtering. */
export function visibleRows(tree, expanded, filtered) {
  const out = [];
  if (filtered) {
    for (let i = 0; i < tree.n; i++) if (filtered.keep[i]) out.push(i);
    return out;
  }
  let i = 0;
  while (i < tree.n) {
    out.push(i);
    i = tree.children[i] && !expanded[i] ? tree.end[i] : i + 1;
  }
  return out;
}

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = text;
  return node;
}

function scaleWidth(mean, std) {
  if (typeof mean !== "number" || typeof std !== "number") return null;
  const rms = Math.sqrt(mean * mean + std * std);
  if (!(rms > 0)) return 0;
  const decade = Math.min(3, Math.max(-3, Math.log10(rms)));
  return ((decade + 3) / 6) * 100;
}

// ---------------------------------------------------------------------------- rows and details

/** One row of the tree: name (with call count and badges), output, mean, std, scale bar and jump cue. */
function rowElement({ p, t, selected, filtered, expanded }, i, k) {
  const flags = p.flags[i];
  const row = el("div", "nbt-row");
  row.style.top = `${k * ROW_H}px`;
  row.dataset.row = String(i);
  row.setAttribute("role", "treeitem");
  row.setAttribute("aria-level", String(p.depth[i] + 1));
  const nameCell = el("span", "nbt-name");
  nameCell.style.paddingLeft = `${p.depth[i] * 14 + 2}px`;
  if (flags & F.GAP) {
    row.classList.add("nbt-gap");
    nameCell.append(el("span", "nbt-twisty", ""), el("span", "nbt-label", `… ${t.name[i]}`));
    row.append(nameCell);
    return row;
  }
  row.dataset.path = t.path[i];
  const kids = t.children[i];
  const isOpen = kids && (filtered ? true : expanded[i]);
  if (kids) row.setAttribute("aria-expanded", isOpen ? "true" : "false");
  if (i === selected) { row.classList.add("nbt-selected"); row.setAttribute("aria-selected", "true"); }
  const twisty = el("span", "nbt-twisty", kids ? (isOpen ? "▾" : "▸") : "");
  const label = el("span", "nbt-label", t.name[i]);
  if (filtered && filtered.keep[i] === 2) label.classList.add("nbt-match");
  nameCell.append(twisty, label);
  nameCell.title = t.path[i];
  const multi = t.calls.get(i);
  if (multi) {
    const badge = el("span", "nbt-times", `×${multi[1]}`);
    badge.title = `${t.path[i]} is called ${multi[1]} times; this is call ${multi[0] + 1}`;
    nameCell.append(badge);
  }
  if (flags & F.NONFINITE) {
    nameCell.append(el("span", "nbt-badge nbt-badge-nan", flags & F.FIRST_NONFINITE ? "first NaN/inf" : "NaN/inf"));
  } else if (flags & F.NAN_BELOW && !isOpen) {
    nameCell.append(el("span", "nbt-badge nbt-badge-nan-below", "NaN/inf inside"));
  }
  if (flags & F.ERROR) nameCell.append(el("span", "nbt-badge nbt-badge-error", "error"));
  else if (flags & F.ERROR_BELOW && !isOpen) nameCell.append(el("span", "nbt-badge nbt-badge-error-below", "error inside"));
  if (p.status) {
    const status = p.vocabulary.statuses[p.status[i]];
    if (status) {
      row.classList.add(`nbt-st-${status}`);
      if (status === "first") nameCell.append(el("span", "nbt-badge nbt-badge-first", "first divergence"));
    }
  }
  if (flags & (F.NONFINITE | F.ERROR)) row.classList.add("nbt-bad");
  const output = p.strings[p.output[i]];
  const out = el("span", "nbt-out");
  if (output) {
    out.textContent = output;
    if (flags & F.MORE_OUTPUTS) {
      out.append(el("span", "nbt-more", " +"));
      out.title = "more than one output tensor: the row shows the first; select the row to see all";
    }
  } else if (kids) {
    out.textContent = `${t.below(i).toLocaleString()} calls`;
    out.classList.add("nbt-muted");
  }
  const mean = el("span", "nbt-num", formatNumber(p.mean[i]));
  const std = el("span", "nbt-num", formatNumber(p.std[i]));
  const scale = el("span", "nbt-scale");
  const width = scaleWidth(p.mean[i], p.std[i]);
  if (width !== null) {
    const bar = el("i", "nbt-bar");
    bar.style.width = `${Math.max(2, width)}%`;
    scale.append(bar);
  }
  if (flags & (F.JUMP_SMALL | F.JUMP_BIG)) {
    const big = flags & F.JUMP_BIG;
    row.classList.add(big ? "nbt-jump-big" : "nbt-jump");
    const arrow = el("span", "nbt-arrow", flags & F.JUMP_UP ? "▲" : "▼");
    arrow.title = `scale ${flags & F.JUMP_UP ? "grew" : "shrank"} more than ${big ? 100 : 10}× against the previous recorded output`;
    scale.append(arrow);
  }
  row.append(nameCell, out, mean, std, scale);
  return row;
}

/** The detail pane of one call: path, facts, comparison, error, every tensor and other argument. */
function detailContent(p, d) {
  if (d.failed) return [el("div", "nbt-d-error", d.failed)];
  const out = [el("div", "nbt-d-path", d.path)];
  const meta = [`call ${d.call + 1} of ${d.calls}`, `depth ${d.depth}`];
  if (d.children) meta.push(`${d.children} direct sub-calls`);
  if (d.duration_ms !== null && d.duration_ms !== undefined) meta.push(`${d.duration_ms} ms`);
  out.push(el("div", "nbt-d-meta", meta.join(" · ")));
  if (d.comparison) {
    const c = d.comparison;
    const box = el("div", `nbt-d-compare nbt-st-${c.status || "none"}`);
    box.append(el("div", "nbt-d-status", p.vocabulary.status_words[c.status] || c.status || "—"));
    box.append(el("div", "", `in b: ${c.b_path || "(no counterpart)"}`));
    if (c.score) box.append(el("div", "", `largest relative difference: ${c.score}`));
    if (c.reassembled) box.append(el("div", "nbt-d-ranks", c.reassembled));
    out.push(box);
  }
  if (d.error && typeof d.error === "object") {
    out.push(el("div", "nbt-d-error", `${d.error.type}: ${d.error.message}`));
  }
  if (d.tensors.length) {
    for (const x of d.tensors) {
      const box = el("div", `nbt-d-tensor${x.nonfinite ? " nbt-bad" : ""}`);
      const line = el("div", "nbt-d-tline");
      line.append(el("span", `nbt-io nbt-io-${x.io}`, x.io === "input" ? "in" : "out"), el("span", "nbt-arg", x.arg),
        el("span", "nbt-d-shape", `[${x.shape.join(", ")}] ${x.dtype}`));
      if (x.nonfinite) line.append(el("span", "nbt-badge nbt-badge-nan", "NaN/inf"));
      box.append(line);
      if (x.mean || x.std || x.min || x.max) {
        const stats = el("div", "nbt-d-stats");
        for (const k of ["mean", "std", "min", "max"]) {
          const cell = el("span", "nbt-d-stat");
          cell.append(el("span", "nbt-d-k", k), el("span", "nbt-d-v", x[k] || "–"));
          stats.append(cell);
        }
        box.append(stats);
      }
      if (x.lines) {
        const values = el("details", "nbt-d-values");
        const more = x.more_lines ? ` (first ${x.lines.length} of ${x.lines.length + x.more_lines} lines)` : "";
        values.append(el("summary", "", `values${more}`), el("pre", "", x.lines.join("\n")));
        box.append(values);
      } else if (x.file) {
        const file = el("div", "nbt-d-file");
        file.append(el("span", "nbt-d-k", "file "), el("code", "", x.file));
        file.title = x.file_path;
        if (!x.file_exists) file.append(el("span", "nbt-d-missing", " (missing)"));
        box.append(file);
      }
      out.push(box);
    }
  }
  if (p.kind === "summary" && d.tensors.length) {
    out.push(el("div", "nbt-hint", "A SUMMARY trace holds no values: open the FULL file (same folder) for the printed values."));
  }
  if (!d.outputs_recorded && d.children) {
    out.push(el("div", "nbt-hint", "Outputs are not recorded for calls with sub-calls (the file format keeps them for the innermost calls only): select a sub-call."));
  }
  if (d.values.length) {
    const list = el("div", "nbt-d-others");
    for (const v of d.values) list.append(el("div", "", `${v.io === "input" ? "in" : "out"} ${v.arg} = ${v.text}`));
    out.push(list);
  }
  return out;
}

// ---------------------------------------------------------------------------- the view

/** The widget's fixed DOM: header (title, chips, filter), tree pane (columns, virtual rows), detail pane. */
function buildDom(host) {
  host.classList.add("nbt-host");
  const root = el("div", "nbt-root");
  const head = el("div", "nbt-head");
  const title = el("div", "nbt-title");
  const chips = el("div", "nbt-chips");
  const search = el("div", "nbt-search");
  const input = el("input", "nbt-filter");
  input.type = "search";
  input.placeholder = "filter module paths…";
  input.setAttribute("aria-label", "filter module paths");
  input.setAttribute("data-lm-suppress-shortcuts", "true");
  const count = el("span", "nbt-count");
  search.append(input, count);
  head.append(title, chips, search);

  const body = el("div", "nbt-body");
  const pane = el("div", "nbt-treepane");
  const columns = el("div", "nbt-row nbt-columns");
  for (const [cls, text] of [["nbt-name", "module"], ["nbt-out", "output"], ["nbt-num", "mean"],
    ["nbt-num", "std"], ["nbt-scale", "scale"]]) columns.append(el("span", cls, text));
  const tree = el("div", "nbt-tree");
  tree.tabIndex = 0;
  tree.setAttribute("role", "tree");
  tree.setAttribute("aria-label", "module calls");
  tree.setAttribute("data-lm-suppress-shortcuts", "true");
  const spacer = el("div", "nbt-spacer");
  const rowsEl = el("div", "nbt-rows");
  spacer.append(rowsEl);
  tree.append(spacer);
  pane.append(columns, tree);
  const detail = el("div", "nbt-detail");
  detail.setAttribute("aria-live", "polite");
  body.append(pane, detail);
  const stepbar = el("div", "nbt-stepbar"); // the step picker of several forwards (step_bar.js)
  stepbar.hidden = true;
  root.append(head, stepbar, body);
  host.replaceChildren(root);
  return { title, chips, input, count, tree, spacer, rowsEl, detail, stepbar };
}

function render({ model, el: host }) {
  const { title, chips, input, count, tree, spacer, rowsEl, detail, stepbar } = buildDom(host);
  // eslint-disable-next-line no-undef -- defined by step_bar.js, shipped in front of this module
  const unmountSteps = typeof mountStepBar === "function" ? mountStepBar(stepbar, model) : () => {};

  let p = null; // payload
  let t = null; // tree built from it
  let expanded = new Uint8Array(0);
  let filtered = null;
  let visible = [];
  let position = new Int32Array(0); // row -> index in `visible`, or -1
  let selected = -1;
  const details = new Map(); // row -> detail (or {error})
  let frame = 0;

  function load() {
    const raw = model.get("payload");
    p = (typeof raw === "string" ? JSON.parse(raw || "{}") : raw) || {};
    if (!p.depth || !p.depth.length) {
      title.textContent = "empty trace";
      t = null;
      visible = [];
      rowsEl.replaceChildren();
      return;
    }
    t = buildTree(p);
    expanded = new Uint8Array(t.n);
    const depthLimit = p.expand_depth ?? 2;
    for (let i = 0; i < t.n; i++) if (t.children[i] && p.depth[i] < depthLimit) expanded[i] = 1;
    details.clear();
    selected = -1;
    drawHead();
    filtered = filterRows(t, model.get("filter") || "");
    input.value = model.get("filter") || "";
    const rows = Math.max(3, Math.min(model.get("visible_rows") || 18, t.n));
    tree.style.height = `${rows * ROW_H}px`;
    refresh();
    const wanted = model.get("selected_row");
    if (typeof wanted === "number" && wanted >= 0 && wanted < t.n) select(wanted, { sync: false, center: true });
    else showDetail();
  }

  function drawHead() {
    const kind = (p.kind || "").toUpperCase();
    title.replaceChildren(
      el("span", "nbt-model", p.model),
      el("span", "nbt-facts", ` · ${p.calls_total.toLocaleString()} calls · ${kind}`),
    );
    if (p.source) {
      const parts = p.source.split(/[\\/]/);
      const src = el("span", "nbt-source", parts.length > 3 ? `…/${parts.slice(-2).join("/")}` : p.source);
      src.title = p.source;
      title.append(src);
    }
    chips.replaceChildren();
    const chip = (row, cls, label) => {
      if (row === undefined || row < 0) return;
      const b = el("button", `nbt-chip ${cls}`, `${label}: ${t.name[row]} ↧`);
      b.title = `go to ${t.path[row]}`;
      b.addEventListener("click", () => select(row, { center: true }));
      chips.append(b);
    };
    chip(p.first_divergence, "nbt-chip-first", "first divergence");
    chip(p.first_nonfinite, "nbt-chip-nan", "first NaN/inf");
    chip(p.innermost_error, "nbt-chip-error", "raised");
  }

  function refresh() {
    if (!t) return;
    visible = visibleRows(t, expanded, filtered);
    position = new Int32Array(t.n).fill(-1);
    visible.forEach((row, k) => { position[row] = k; });
    spacer.style.height = `${visible.length * ROW_H}px`;
    count.textContent = filtered
      ? `${filtered.matches.toLocaleString()} match${filtered.matches === 1 ? "" : "es"}`
      : `${visible.length.toLocaleString()} of ${t.n.toLocaleString()} rows`;
    draw();
  }

  function schedule() {
    if (frame) return;
    frame = requestAnimationFrame(() => { frame = 0; draw(); });
  }

  function draw() {
    if (!t) return;
    const height = tree.clientHeight || ROW_H * 18;
    const first = Math.max(0, Math.floor(tree.scrollTop / ROW_H) - OVERSCAN);
    const last = Math.min(visible.length, Math.ceil((tree.scrollTop + height) / ROW_H) + OVERSCAN);
    const out = [];
    for (let k = first; k < last; k++) out.push(rowElement({ p, t, selected, filtered, expanded }, visible[k], k));
    rowsEl.replaceChildren(...out);
  }

  // ---------------------------------------------------------------- selection and details
  function reveal(row) {
    let changed = false;
    if (filtered && !filtered.keep[row]) { setFilter(""); changed = true; }
    for (let up = t.parent[row]; up >= 0; up = t.parent[up]) {
      if (!expanded[up]) { expanded[up] = 1; changed = true; }
    }
    if (changed) refresh();
  }

  function scrollTo(row, center) {
    const k = position[row];
    if (k < 0) return;
    const top = k * ROW_H;
    const h = tree.clientHeight || ROW_H * 18;
    if (center) tree.scrollTop = Math.max(0, top - h / 2 + ROW_H / 2);
    else if (top < tree.scrollTop) tree.scrollTop = top;
    else if (top + ROW_H > tree.scrollTop + h) tree.scrollTop = top + ROW_H - h;
  }

  function select(row, { sync = true, center = false } = {}) {
    if (!t || row < 0 || row >= t.n) return;
    reveal(row);
    selected = row;
    scrollTo(row, center);
    draw();
    if (sync && !(p.flags[row] & F.GAP)) {
      model.set("selected_row", row);
      model.set("selected", t.path[row]);
      model.save_changes();
    }
    showDetail();
  }

  function showDetail() {
    if (!t || selected < 0) {
      detail.replaceChildren(el("div", "nbt-hint", "Select a row to see every input and output of that call."));
      return;
    }
    if (p.flags[selected] & F.GAP) {
      detail.replaceChildren(el("div", "nbt-hint", `${t.name[selected]}: these layer blocks were left out of the files by layer pruning (trace with do_prune_layers=False / --no-prune to keep them).`));
      return;
    }
    const got = details.get(selected);
    if (!got) {
      detail.replaceChildren(el("div", "nbt-d-path", t.path[selected]), el("div", "nbt-hint", "loading details…"));
      model.send({ type: "detail", row: selected });
      return;
    }
    detail.replaceChildren(...detailContent(p, got));
  }

  function onMessage(msg) {
    if (!msg || msg.type !== "detail") return;
    details.set(msg.row, msg.detail ? msg.detail : { failed: msg.error || "no details" });
    if (msg.row === selected) showDetail();
  }

  // ---------------------------------------------------------------- interaction
  function toggle(row, open) {
    if (!t.children[row] || filtered) return;
    expanded[row] = open === undefined ? (expanded[row] ? 0 : 1) : open ? 1 : 0;
    refresh();
  }

  function onClick(event) {
    const rowEl = event.target.closest(".nbt-row");
    if (!rowEl || !rowEl.dataset.row) return;
    const row = Number(rowEl.dataset.row);
    if (event.target.closest(".nbt-twisty") && t.children[row]) toggle(row);
    else select(row);
    tree.focus({ preventScroll: true });
  }

  function onDoubleClick(event) {
    const rowEl = event.target.closest(".nbt-row");
    if (rowEl && rowEl.dataset.row) toggle(Number(rowEl.dataset.row));
  }

  function onKey(event) {
    if (!t || !visible.length) return;
    const k = selected >= 0 ? position[selected] : -1;
    const page = Math.max(1, Math.floor((tree.clientHeight || ROW_H * 18) / ROW_H) - 1);
    const go = (index) => select(visible[Math.max(0, Math.min(visible.length - 1, index))]);
    let handled = true;
    switch (event.key) {
      case "ArrowDown": go(k < 0 ? 0 : k + 1); break;
      case "ArrowUp": go(k < 0 ? 0 : k - 1); break;
      case "PageDown": go(k + page); break;
      case "PageUp": go(k - page); break;
      case "Home": go(0); break;
      case "End": go(visible.length - 1); break;
      case "ArrowRight":
        if (selected < 0) go(0);
        else if (t.children[selected] && !expanded[selected] && !filtered) toggle(selected, true);
        else if (t.children[selected]) go(k + 1);
        break;
      case "Enter":
        if (selected >= 0 && t.children[selected]) toggle(selected, !expanded[selected]);
        break;
      case "ArrowLeft":
        if (selected < 0) break;
        if (t.children[selected] && expanded[selected] && !filtered) toggle(selected, false);
        else if (t.parent[selected] >= 0) select(t.parent[selected]);
        break;
      default: handled = false;
    }
    if (handled) { event.preventDefault(); event.stopPropagation(); }
  }

  let filterTimer = 0;
  function setFilter(text) {
    if (!t) return;
    input.value = text;
    filtered = filterRows(t, text);
    tree.scrollTop = 0;
    refresh();
    if (selected >= 0 && position[selected] >= 0) scrollTo(selected, true);
  }
  function onInput() {
    clearTimeout(filterTimer);
    filterTimer = setTimeout(() => {
      setFilter(input.value);
      model.set("filter", input.value);
      model.save_changes();
    }, 120);
  }
  function onFilterKey(event) {
    event.stopPropagation();
    if (event.key === "Escape") { input.value = ""; onInput(); }
    if (event.key === "ArrowDown") { event.preventDefault(); tree.focus(); if (visible.length) select(visible[0]); }
  }

  const onScroll = () => schedule();
  const onPayload = () => load();
  const onFilterTrait = () => { if ((model.get("filter") || "") !== input.value) setFilter(model.get("filter") || ""); };
  const onSelectedTrait = () => {
    const row = model.get("selected_row");
    if (!t || row === selected) return;
    if (row < 0) { selected = -1; draw(); showDetail(); return; }
    select(row, { sync: false, center: true });
  };
  const onVisibleRows = () => { if (t) { tree.style.height = `${Math.max(3, Math.min(model.get("visible_rows"), t.n)) * ROW_H}px`; draw(); } };

  rowsEl.addEventListener("click", onClick);
  rowsEl.addEventListener("dblclick", onDoubleClick);
  tree.addEventListener("keydown", onKey);
  tree.addEventListener("scroll", onScroll, { passive: true });
  input.addEventListener("input", onInput);
  input.addEventListener("keydown", onFilterKey);
  model.on("msg:custom", onMessage);
  model.on("change:payload", onPayload);
  model.on("change:filter", onFilterTrait);
  model.on("change:selected_row", onSelectedTrait);
  model.on("change:visible_rows", onVisibleRows);
  load();
  // The host may not be in the document yet: draw again once it has a size.
  requestAnimationFrame(() => draw());

  return () => {
    unmountSteps();
    clearTimeout(filterTimer);
    if (frame) cancelAnimationFrame(frame);
    model.off("msg:custom", onMessage);
    model.off("change:payload", onPayload);
    model.off("change:filter", onFilterTrait);
    model.off("change:selected_row", onSelectedTrait);
    model.off("change:visible_rows", onVisibleRows);
  };
}

export default { render };
