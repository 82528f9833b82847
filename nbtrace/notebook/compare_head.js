// TraceView front end, part 4 of 5: colours of the theme, a comparison's verdict banner, and the legend
// (joined after detail_pane.js, see view.py). Colours, words and the verdict come with the payload
// (nbtrace/render/vocabulary.py, nbtrace/render/verdict.py).

/** True when the notebook around `host` has a dark theme: JupyterLab / Notebook 7 and VS Code say so on
 * the body; elsewhere the first background behind the widget tells. */
function isDark(host) {
  const body = document.body;
  const light = body.dataset.jpThemeLight;
  if (light !== undefined) return light === "false";
  if (body.classList.contains("vscode-dark") || body.classList.contains("vscode-high-contrast")) return true;
  for (let node = host; node && node.nodeType === 1; node = node.parentElement) {
    const m = getComputedStyle(node).backgroundColor.match(/rgba?\(([\d.]+), ([\d.]+), ([\d.]+)(?:, ([\d.]+))?\)/);
    if (m && (m[4] === undefined || Number(m[4]) > 0.5)) {
      return 0.2126 * m[1] + 0.7152 * m[2] + 0.0722 * m[3] < 128;
    }
  }
  return false;
}

/** Give the root the vocabulary's colours for both themes, and follow the theme when it changes. */
function applyTheme(root, host, vocabulary) {
  for (const [name, pair] of Object.entries(vocabulary.colours || {})) {
    root.style.setProperty(`--nbt-c-${name}-light`, pair.light);
    root.style.setProperty(`--nbt-c-${name}-dark`, pair.dark);
  }
  for (const [name, colour] of Object.entries(vocabulary.badges || {})) root.style.setProperty(`--nbt-b-${name}`, colour);
  const follow = () => root.classList.toggle("nbt-dark", isDark(host));
  follow();
  const watch = new MutationObserver(follow);
  watch.observe(document.body, { attributes: true, attributeFilter: ["data-jp-theme-light", "class"] });
  return () => watch.disconnect();
}

/** The title of a comparison: both sides named, a's facts and b's. */
function compareTitle(p) {
  const c = p.compare;
  const words = p.vocabulary.words;
  const kind = (p.kind || "").toUpperCase();
  const a = el("span", "nbt-side");
  a.append(el("span", "nbt-side-k", `${words.a}: `), el("span", "nbt-model", c.a_model),
    el("span", "nbt-facts", ` · ${p.calls_total.toLocaleString()} calls · ${kind}`));
  const b = el("span", "nbt-side");
  b.append(el("span", "nbt-side-k", `${words.b}: `), el("span", "nbt-model nbt-model-b", c.b_model),
    el("span", "nbt-facts", ` · ${c.b_calls.toLocaleString()} calls · ${(c.b_kind || "").toUpperCase()}`));
  if (c.b_source) b.title = c.b_source;
  if (p.source) a.title = p.source;
  return [a, el("span", "nbt-vs", ` ${words.vs} `), b];
}

/** The verdict banner: ✗ diverge, where and how sure, a button to the first divergence, and the notes. */
function verdictBanner(banner, p, goFirst, firstName) {
  const c = p.compare;
  if (!c) {
    banner.hidden = true;
    banner.replaceChildren();
    return;
  }
  const v = c.verdict;
  const vocab = p.vocabulary;
  const line = el("div", "nbt-verdict-line");
  const colour = vocab.verdict_colours[v.verdict] || "diverged";
  line.append(el("span", `nbt-badge nbt-verdict-badge nbt-b-${colour}`, `${v.mark} ${v.word}`));
  const d = v.divergence;
  if (d) {
    const where = el("span", "nbt-verdict-where");
    where.append(el("span", "", `${vocab.status_words.first}: `), pathElement("nbt-d-inline", d.module_path));
    if (d.b_path) {
      where.append(el("span", "nbt-d-k", ` (${vocab.words.b}: `), pathElement("nbt-d-inline", d.b_path), el("span", "nbt-d-k", ")"));
    }
    line.append(where);
    if (d.confidence) line.append(el("span", "nbt-verdict-confidence", `${vocab.words.confidence}: ${d.confidence}`));
    if (p.first_divergence >= 0) {
      const go = el("button", "nbt-chip nbt-chip-first", `${vocab.words.go_first} ${firstName} ↧`);
      go.title = d.reason;
      go.addEventListener("click", goFirst);
      line.append(go);
    }
  } else {
    line.append(el("span", "nbt-verdict-where", v.headline.split(": ").slice(1).join(": ") || v.headline));
  }
  const parts = [line];
  if (v.end_to_end) parts.push(el("div", "nbt-verdict-end", `${vocab.words.end_to_end}: ${v.end_to_end}`));
  if (d && d.evidence.length) parts.push(el("div", "nbt-verdict-evidence", d.evidence[0].line));
  else if (d && d.reason) parts.push(el("div", "nbt-verdict-evidence", d.reason));
  for (const note of v.notes) parts.push(el("div", "nbt-verdict-note", `${vocab.words.notes}: ${note}`));
  for (const weight of v.weights.slice(0, 4)) parts.push(el("div", "nbt-verdict-note", `${vocab.words.weights}: ${weight}`));
  if (v.suspects.length) parts.push(el("div", "nbt-verdict-note", `${vocab.words.suspects}: ${v.suspects.join(", ")}`));
  banner.hidden = false;
  banner.replaceChildren(...parts);
}

/** The legend: what each colour, mark and column of the tree means. */
function legendContent(legend, p) {
  const vocab = p.vocabulary;
  const summary = el("summary", "nbt-legend-line");
  const meanings = el("ul", "nbt-d-list");
  if (p.status) {
    for (const name of vocab.statuses.slice(1)) {
      const swatch = el("span", `nbt-swatch nbt-st-${name}`, vocab.status_words[name]);
      swatch.title = vocab.status_meanings[name];
      summary.append(swatch);
      meanings.append(el("li", "", `${vocab.status_words[name]}: ${vocab.status_meanings[name]}`));
    }
  }
  if (p.compare && p.compare.difference) {
    const diff = p.compare.difference;
    summary.append(el("span", "nbt-legend-item", `${diff.header}: ▬`));
    meanings.append(el("li", "", `${diff.header}: ${diff.meaning}`));
  }
  const jump = el("span", "nbt-legend-item nbt-legend-jump", vocab.words.scale_mark);
  jump.title = vocab.jump_legend;
  summary.append(jump, el("span", "nbt-badge nbt-badge-nan", vocab.words.nan_badge));
  meanings.append(el("li", "", vocab.jump_legend), el("li", "", `${vocab.words.nan_badge}: ${vocab.words.nan_legend}`),
    el("li", "", vocab.words.scale_legend));
  summary.prepend(el("span", "nbt-d-k", `${vocab.words.legend}:`));
  legend.replaceChildren(summary, meanings);
}
