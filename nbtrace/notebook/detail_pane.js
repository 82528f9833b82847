// TraceView front end, part 3 of 5: the detail pane of one call (joined after tree_row.js, see view.py).
// A comparison's part (status, situation, difference, the verdict's reason and evidence, b's tensors
// beside a's) arrives in words from the kernel (nbtrace/notebook/compare_payload.py): shown as it is.

/** mean, std, min, max of one tensor, with a side label ("a", "b") in a comparison. */
function statsLine(x, side) {
  const stats = el("div", "nbt-d-stats");
  if (side) stats.append(el("span", `nbt-d-side nbt-d-side-${side}`, side));
  for (const k of ["mean", "std", "min", "max"]) {
    const cell = el("span", "nbt-d-stat");
    cell.append(el("span", "nbt-d-k", k), el("span", "nbt-d-v", x[k] || "–"));
    stats.append(cell);
  }
  return stats;
}

/** The printed values (FULL trace) or the safetensors file of one tensor. */
function valuesOf(x, label) {
  if (x.lines) {
    const values = el("details", "nbt-d-values");
    const more = x.more_lines ? ` (first ${x.lines.length} of ${x.lines.length + x.more_lines} lines)` : "";
    values.append(el("summary", "", `${label}${more}`), el("pre", "", x.lines.join("\n")));
    return values;
  }
  if (x.file) {
    const file = el("div", "nbt-d-file");
    file.append(el("span", "nbt-d-k", "file "), pathElement("", x.file, true, "code"));
    file.title = x.file_path;
    if (!x.file_exists) file.append(el("span", "nbt-d-missing", " (missing)"));
    return file;
  }
  return null;
}

/** One tensor of the call; in a comparison, b's tensor beside it and how the two compare. */
function tensorBox(p, x, pair) {
  const words = p.vocabulary.words;
  const box = el("div", `nbt-d-tensor${x.nonfinite ? " nbt-bad" : ""}`);
  box.dataset.arg = `${x.io} ${x.arg}`;
  const line = el("div", "nbt-d-tline");
  line.append(el("span", `nbt-io nbt-io-${x.io}`, x.io === "input" ? "in" : "out"), el("span", "nbt-arg", x.arg),
    el("span", "nbt-d-shape", `[${x.shape.join(", ")}] ${x.dtype}`));
  if (x.nonfinite) line.append(el("span", "nbt-badge nbt-badge-nan", words.nan_badge));
  if (pair) {
    const verdict = el("span", `nbt-d-verdict nbt-ok-${pair.ok}`, pair.verdict);
    line.append(verdict);
  }
  box.append(line);
  const b = pair && pair.b_detail;
  if (x.mean || x.std || x.min || x.max) box.append(statsLine(x, b ? words.a_side : ""));
  if (b) {
    if (b.arg !== x.arg || pair.b_shape !== pair.shape || pair.b_dtype !== pair.dtype) {
      box.append(el("div", "nbt-d-bname", `${words.b_side}: ${b.arg} [${b.shape.join(", ")}] ${b.dtype}`));
    }
    if (b.mean || b.std || b.min || b.max) box.append(statsLine(b, words.b_side));
  }
  if (pair) {
    const diff = el("div", "nbt-d-diffline");
    diff.append(el("span", "nbt-d-k", pair.basis), el("span", "", pair.numbers));
    if (pair.tolerance !== "-") diff.append(el("span", "nbt-d-k", ` ${words.tolerance} ${pair.tolerance}`));
    if (pair.reassembled) diff.append(el("span", "nbt-d-k", ` · ${pair.reassembled}`));
    box.append(diff);
  }
  const values = valuesOf(x, b ? `${words.a_side} values` : "values");
  if (values) box.append(values);
  const bValues = b ? valuesOf(b, `${words.b_side} values`) : null;
  if (bValues) box.append(bValues);
  return box;
}

/** A list of sentences under a small heading. */
function sentences(className, heading, lines) {
  const box = el("div", className);
  if (heading) box.append(el("div", "nbt-d-k", heading));
  const list = el("ul", "nbt-d-list");
  for (const line of lines) list.append(el("li", "", line));
  box.append(list);
  return box;
}

/** The operations inside a narrowed call, both sides, the first diverging one marked, each with its line. */
function operationsBlock(ops) {
  const h = ops.headings;
  const box = el("details", "nbt-d-operations");
  box.open = true;
  box.append(el("summary", "nbt-d-k", `${h.title} (${ops.rows.length})`));
  const table = el("table", "nbt-op-table");
  const head = el("tr", "");
  for (const key of ["side", "operation", "module", "line", "code", "status"]) head.append(el("th", "", h[key]));
  table.append(head);
  for (const r of ops.rows) {
    const row = el("tr", `nbt-op nbt-op-${r.status}`);
    row.dataset.side = r.side;
    row.dataset.index = String(r.index);
    row.append(el("td", "nbt-op-side", h[r.side]), el("td", "nbt-op-name", r.operation), el("td", "", r.module || "·"),
      el("td", "nbt-op-line", `${r.file}:${r.line}`), el("td", "nbt-op-code", r.code), el("td", "nbt-op-status", r.status_words));
    table.append(row);
  }
  box.append(table);
  if (ops.left_out) box.append(el("div", "nbt-hint", `… ${ops.left_out}`));
  return box;
}

/** The verdict's part of the first divergence: reason, where it was seen, evidence, hints, tensors seen. */
function divergenceBlock(p, v) {
  const words = p.vocabulary.words;
  const out = [el("div", "nbt-d-reason", v.reason)];
  if (v.operation) out.push(el("div", "nbt-d-operation", v.operation));
  if (v.operations) out.push(operationsBlock(v.operations));
  if (v.numbers) {
    const seen = el("div", "nbt-d-seen");
    seen.append(el("span", "nbt-d-k", `${words.seen_at} `), pathElement("nbt-d-inline", v.seen_at), el("div", "", v.numbers));
    out.push(seen);
  }
  if (v.evidence.length) {
    const head = v.confidence ? `${words.evidence} (${words.confidence}: ${v.confidence})` : words.evidence;
    out.push(sentences("nbt-d-evidence", head, v.evidence));
  }
  if (v.ranks) out.push(el("div", "nbt-d-rankline", v.ranks));
  if (v.weights.length) out.push(sentences("nbt-d-weights", words.weights, v.weights));
  if (v.hints.length) out.push(sentences("nbt-d-hints", words.hints, v.hints));
  if (v.observed) {
    const seen = el("div", "nbt-d-observed");
    const head = el("div", "nbt-d-k");
    head.append(document.createTextNode(`${words.tensors_of} `), pathElement("nbt-d-inline", v.observed.path));
    seen.append(head);
    for (const pair of v.observed.tensors) {
      const row = el("div", "nbt-d-obs");
      row.append(el("span", `nbt-io nbt-io-${pair.io}`, pair.io === "input" ? "in" : "out"),
        el("span", "nbt-arg", pair.arg === pair.b_arg ? pair.arg : `${pair.arg} ↔ ${pair.b_arg}`),
        el("span", "", pair.tolerance === "-" ? pair.numbers : `${pair.numbers} · ${words.tolerance} ${pair.tolerance}`),
        el("span", `nbt-d-verdict nbt-ok-${pair.ok}`, pair.verdict));
      seen.append(row);
    }
    out.push(seen);
  }
  return out;
}

/** The comparison box of a call: status, what that means for it, b's counterpart, its difference. */
function compareBox(p, c) {
  const words = p.vocabulary.words;
  const box = el("div", `nbt-d-compare nbt-st-${c.status || "none"}`);
  const head = el("div", "nbt-d-status");
  head.append(el("span", `nbt-badge nbt-badge-st nbt-b-${c.status}`, c.status_word || c.status || "—"),
    el("span", "nbt-d-situation", c.situation || ""));
  box.append(head);
  const b = el("div", "nbt-d-bpath");
  b.append(el("span", "nbt-d-k", `${words.in_b}: `));
  b.append(c.b_path ? pathElement("nbt-d-inline", c.b_path) : el("span", "", words.no_counterpart));
  box.append(b);
  if (c.difference) {
    box.append(el("div", "nbt-d-difference", c.difference.line));
    if (c.difference.evidence.length) box.append(sentences("nbt-d-evidence", words.evidence, c.difference.evidence));
  }
  if (c.divergence) box.append(...divergenceBlock(p, c.divergence));
  if (c.reassembled) box.append(el("div", "nbt-d-ranks", c.reassembled));
  return box;
}

/** The detail pane of one call: path, facts, comparison, error, every tensor and other argument. */
function detailContent(p, d) {
  if (d.failed) return [el("div", "nbt-d-error", d.failed)];
  const out = [pathElement("nbt-d-path", d.path)];
  const meta = [`call ${d.call + 1} of ${d.calls}`, `depth ${d.depth}`];
  if (d.children) meta.push(`${d.children} direct sub-calls`);
  if (d.duration_ms !== null && d.duration_ms !== undefined) meta.push(`${d.duration_ms} ms`);
  out.push(el("div", "nbt-d-meta", meta.join(" · ")));
  const c = d.comparison;
  if (c) out.push(compareBox(p, c));
  if (d.error && typeof d.error === "object") {
    out.push(el("div", "nbt-d-error", `${d.error.type}: ${d.error.message}`));
  }
  // eslint-disable-next-line no-undef -- defined by gradient_plot.js (a trace with a backward pass)
  if (d.backward && typeof backwardTable === "function") out.push(backwardTable(d.backward));
  for (const x of d.tensors) out.push(tensorBox(p, x, c ? c.tensors[`${x.io} ${x.arg}`] : null));
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
