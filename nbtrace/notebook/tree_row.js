// TraceView front end, part 2 of 5: one row of the tree (joined after tree_model.js, see view.py).
// Every word a row shows (status words, jump tooltips, the difference cell) comes with the payload.

/** The difference cell of a comparison's row: the text and a bar on a log scale (own over inherited). */
function differenceCell(p, index, i) {
  const cell = el("span", "nbt-diff");
  const found = index.difference.get(i);
  if (!found) {
    cell.textContent = "–";
    cell.classList.add("nbt-muted");
    return cell;
  }
  cell.title = found.tooltip;
  const bars = el("span", "nbt-diff-bars");
  const own = el("i", "nbt-diff-bar");
  own.style.width = `${found.level > 0 ? Math.max(3, found.level) : 0}%`;
  bars.append(own);
  if (found.inherited >= 0) {
    const handed = el("i", "nbt-diff-inherited");
    handed.style.width = `${found.inherited > 0 ? Math.max(3, found.inherited) : 0}%`;
    bars.append(handed);
  }
  cell.append(el("span", "nbt-diff-text", found.text), bars);
  return cell;
}

/** One row of the tree: name (with call count and badges), output, mean, std, scale bar and jump cue,
 * and for a comparison the call's difference. */
function rowElement({ p, t, index, selected, filtered, expanded }, i, k) {
  const flags = p.flags[i];
  const words = p.vocabulary.words;
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
    const badge = el("span", "nbt-badge nbt-badge-nan", flags & F.FIRST_NONFINITE ? words.first_nan_badge : words.nan_badge);
    badge.title = words.nan_legend;
    nameCell.append(badge);
  } else if (flags & F.NAN_BELOW && !isOpen) {
    nameCell.append(el("span", "nbt-badge nbt-badge-nan-below", words.nan_inside));
  }
  if (flags & F.ERROR) nameCell.append(el("span", "nbt-badge nbt-badge-error", "error"));
  else if (flags & F.ERROR_BELOW && !isOpen) nameCell.append(el("span", "nbt-badge nbt-badge-error-below", "error inside"));
  if (p.status) {
    const status = p.vocabulary.statuses[p.status[i]];
    if (status) {
      row.classList.add(`nbt-st-${status}`);
      row.dataset.status = status;
      if (status === "first") nameCell.append(el("span", "nbt-badge nbt-badge-first", p.vocabulary.status_words.first));
      if (status === "unresolved" && i === p.first_divergence) {
        nameCell.append(el("span", "nbt-badge nbt-badge-unresolved", p.vocabulary.status_words.unresolved));
      }
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
    row.classList.add(flags & F.JUMP_BIG ? "nbt-jump-big" : "nbt-jump");
    const arrow = el("span", "nbt-arrow", flags & F.JUMP_UP ? "▲" : "▼");
    arrow.title = index.jumps.get(i) || "";
    scale.append(arrow);
  }
  row.append(nameCell, out, mean, std, scale);
  if (p.compare && p.compare.difference) row.append(differenceCell(p, index, i));
  return row;
}
