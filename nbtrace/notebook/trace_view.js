// TraceView front end, the view (joined last, after gradient_plot.js, see assets.py): a virtualized
// call tree of an nbtrace Trace, or of trace a of a comparison. A plain ES module for anywidget (no build
// step, no dependencies). A row's details are asked for with model.send({type: "detail", row}) and
// arrive as a custom message.

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
  const banner = el("div", "nbt-verdict"); // a comparison's verdict (compare_head.js)
  banner.hidden = true;
  banner.setAttribute("role", "status");
  const legend = el("details", "nbt-legend");
  const gradients = el("details", "nbt-gradients"); // gradient norms across layers (gradient_plot.js)
  gradients.open = true;
  gradients.hidden = true;
  root.append(head, stepbar, banner, body, gradients, legend);
  host.replaceChildren(root);
  return { root, title, chips, input, count, columns, tree, spacer, rowsEl, detail, stepbar, banner, legend, gradients };
}

function render({ model, el: host }) {
  const { root, title, chips, input, count, columns, tree, spacer, rowsEl, detail, stepbar, banner, legend, gradients } =
    buildDom(host);
  let unmountTheme = () => {};
  // eslint-disable-next-line no-undef -- defined by step_bar.js, shipped in front of this module
  const unmountSteps = typeof mountStepBar === "function" ? mountStepBar(stepbar, model) : () => {};

  let p = null; // payload
  let t = null; // tree built from it
  let index = null; // its sparse columns, by row
  let expanded = new Uint8Array(0);
  let filtered = null;
  let visible = [];
  let position = new Int32Array(0); // row -> index in `visible`, or -1
  let selected = -1;
  const details = new Map(); // row -> detail (or {error})
  let frame = 0;
  let waiting = 0; // the timer of a detail asked for and not answered yet

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
    index = indexPayload(p);
    unmountTheme();
    unmountTheme = applyTheme(root, host, p.vocabulary);
    expanded = new Uint8Array(t.n);
    const depthLimit = p.expand_depth ?? 2;
    for (let i = 0; i < t.n; i++) if (t.children[i] && p.depth[i] < depthLimit) expanded[i] = 1;
    details.clear();
    if (p.initial_detail) details.set(p.initial_detail.row, p.initial_detail.detail);
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
    root.classList.toggle("nbt-with-diff", Boolean(p.compare && p.compare.difference));
    const diffColumn = columns.querySelector(".nbt-diff");
    if (diffColumn) diffColumn.remove();
    if (p.compare && p.compare.difference) {
      const header = el("span", "nbt-diff", p.compare.difference.header);
      header.title = p.compare.difference.meaning;
      columns.append(header);
    }
    verdictBanner(banner, p, () => select(p.first_divergence, { center: true }),
      p.first_divergence >= 0 ? t.name[p.first_divergence] : "");
    legendContent(legend, p);
    if (p.compare) {
      title.replaceChildren(...compareTitle(p));
    } else {
      title.replaceChildren(
        el("span", "nbt-model", p.model),
        el("span", "nbt-facts", ` · ${p.calls_total.toLocaleString()} calls · ${kind}`),
      );
    }
    if (p.source && !p.compare) {
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
    if (!p.compare) chip(p.first_divergence, "nbt-chip-first", p.vocabulary.status_words.first);
    chip(p.first_nonfinite, "nbt-chip-nan", p.vocabulary.words.first_nan_badge);
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
    for (let k = first; k < last; k++) out.push(rowElement({ p, t, index, selected, filtered, expanded }, visible[k], k));
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
    clearTimeout(waiting);
    if (!t || selected < 0) {
      detail.replaceChildren(el("div", "nbt-hint", p && p.vocabulary ? p.vocabulary.words.select : ""));
      return;
    }
    if (p.flags[selected] & F.GAP) {
      detail.replaceChildren(el("div", "nbt-hint", `${t.name[selected]}: these layer blocks were left out of the files by layer pruning (trace with do_prune_layers=False / --no-prune to keep them).`));
      return;
    }
    const got = details.get(selected);
    if (!got) {
      const words = p.vocabulary.words;
      const hint = el("div", "nbt-hint", words.loading);
      detail.replaceChildren(pathElement("nbt-d-path", t.path[selected]), hint);
      model.send({ type: "detail", row: selected });
      waiting = setTimeout(() => { hint.textContent = words.no_kernel; }, 5000);
      return;
    }
    detail.replaceChildren(...detailContent(p, got));
  }

  function onMessage(msg) {
    if (!msg || msg.type !== "detail") return;
    details.set(msg.row, msg.detail ? msg.detail : { failed: msg.error || "no details" });
    if (msg.row === selected) showDetail(); // (clears the no-kernel timer)
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
  // eslint-disable-next-line no-undef -- defined by gradient_plot.js, shipped in front of this module
  const unmountGradients = typeof mountGradientPlot === "function"
    ? mountGradientPlot(gradients, model, (row) => { select(row, { center: true }); tree.focus({ preventScroll: true }); })
    : () => {};
  // The host may not be in the document yet: draw again once it has a size.
  requestAnimationFrame(() => draw());

  return () => {
    unmountSteps();
    unmountGradients();
    unmountTheme();
    clearTimeout(filterTimer);
    clearTimeout(waiting);
    if (frame) cancelAnimationFrame(frame);
    model.off("msg:custom", onMessage);
    model.off("change:payload", onPayload);
    model.off("change:filter", onFilterTrait);
    model.off("change:selected_row", onSelectedTrait);
    model.off("change:visible_rows", onVisibleRows);
  };
}

export default { render };
