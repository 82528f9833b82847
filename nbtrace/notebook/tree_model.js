// TraceView front end, part 1 of 5: the pure helpers of the tree (no DOM but `el`), shared by the parts
// that follow (tree_row.js, detail_pane.js, compare_head.js, trace_view.js; view.py joins them into one
// ES module). The kernel sends one columnar payload (see nbtrace/notebook/payload.py).

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

/** Lookups of the payload's sparse columns: the difference cell and the jump tooltip of a row. */
export function indexPayload(p) {
  const cells = p.compare && p.compare.difference ? p.compare.difference.cells : [];
  return {
    difference: new Map(cells.map(([row, text, level, inherited, tooltip]) => [row, { text, level, inherited, tooltip }])),
    jumps: new Map((p.jumps || []).map(([row, words]) => [row, words])),
  };
}

/** A module path (or a file name) that wraps only before its dots (and, with `more`, its underscores and
 * slashes): never inside a name. */
export function pathElement(className, path, more = false, tag = "div") {
  const node = el(tag, className);
  const parts = String(path || "").split(more ? /(?=[._/])/ : /(?=\.)/);
  parts.forEach((part, k) => {
    if (k) node.append(document.createElement("wbr"));
    node.append(document.createTextNode(part));
  });
  return node;
}
