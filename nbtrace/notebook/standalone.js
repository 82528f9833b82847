// A saved page (nbtrace/notebook/html_file.py): joined after trace_view.js in the page's one module script.
// It plays anywidget's model for render() from the JSON the page carries, so the widget runs with no
// kernel: `payload` is the shown step's <script id="nbt-payload-K">, a row's details (which a kernel
// would send) come from <script id="nbt-details-K-C"> (compressed, by chunks of rows), read when a row of
// the chunk is first selected, `gradients` (a backward pass's plot) from <script id="nbt-gradients-K">, and a
// new step swaps the payload and the plot as the kernel does. The page follows the
// system's light or dark theme.

/** The text of the page's data block `id` ("" when the page has none). */
function pageData(id) {
  const node = document.getElementById(id);
  return node ? node.textContent : "";
}

/** The row of `payload` that shows the call `path`, call `k` (-1 when that step has no such call). */
function rowOfCall(payload, path, k) {
  if (!path) return -1;
  const tree = buildTree(payload);
  for (let row = 0; row < tree.n; row++) {
    if (tree.path[row] === path && (tree.calls.get(row) || [0])[0] === k) return row;
  }
  return -1;
}

/** anywidget's model (get, set, on, off, save_changes, send) for the view the page opens on. */
function pageModel(view) {
  const traits = { ...view, words: undefined, payload: pageData(`nbt-payload-${view.step}`) || "{}",
    gradients: pageData(`nbt-gradients-${view.step}`) };
  const handlers = new Map();
  const details = new Map(); // "step-chunk" -> a promise of those rows' details, read on first use
  let shownStep = view.step;
  const words = view.words;
  const emit = (event, ...args) => (handlers.get(event) || []).slice().forEach((f) => f(...args));

  /** The details of a step's rows `chunk * size ...`: gzip-compressed JSON in base64 (<script
   * id="nbt-details-K-C">), inflated by the browser itself on first use. */
  function detailsOf(step, chunk) {
    const key = `${step}-${chunk}`;
    if (!details.has(key)) {
      const bytes = Uint8Array.from(atob(pageData(`nbt-details-${key}`).trim()), (c) => c.charCodeAt(0));
      const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
      details.set(key, new Response(stream).text().then((text) => JSON.parse(text)));
    }
    return details.get(key);
  }

  /** What the kernel does when `step` changes: the new step's payload, on the same call where it has it,
   * else on the step's own first divergence. */
  function showStep(step) {
    const before = JSON.parse(traits.payload);
    const row = traits.selected_row;
    const call = row >= 0 ? ((before.calls || []).find(([r]) => r === row) || [row, 0])[1] : 0;
    const text = pageData(`nbt-payload-${step}`);
    if (!text) return;
    const after = JSON.parse(text);
    let keep = rowOfCall(after, traits.selected, call);
    if (keep < 0) keep = after.first_divergence >= 0 ? after.first_divergence : -1;
    shownStep = step;
    traits.selected_row = keep;
    traits.selected = keep >= 0 ? buildTree(after).path[keep] : "";
    traits.gradients = pageData(`nbt-gradients-${step}`);
    emit("change:gradients");
    traits.payload = text;
    emit("change:payload");
  }

  return {
    get: (name) => traits[name],
    set: (name, value) => {
      if (traits[name] === value) return;
      traits[name] = value;
      emit(`change:${name}`);
    },
    save_changes: () => { if (traits.step !== shownStep) showStep(traits.step); },
    send: (msg) => {
      if (!msg || msg.type !== "detail") return;
      const step = shownStep;
      const answer = (reply) => {
        if (step === shownStep) emit("msg:custom", { type: "detail", row: msg.row, ...reply });
      };
      const size = view.chunk;
      const chunk = Math.floor(msg.row / size);
      detailsOf(step, chunk).then( // answered as a message, as a kernel would, after the asking code has run
        (list) => {
          const found = list[msg.row - chunk * size];
          answer(found ? { detail: found } : { error: words.missing_row.replace("{row}", msg.row) });
        },
        (error) => answer({ error: words.unreadable.replace("{error}", String(error)) }),
      );
    },
    on: (event, f) => { handlers.set(event, [...(handlers.get(event) || []), f]); },
    off: (event, f) => { handlers.set(event, (handlers.get(event) || []).filter((g) => g !== f)); },
  };
}

/** Follow the system theme the way JupyterLab says its own (compare_head.js reads and watches it). */
function followSystemTheme() {
  const dark = window.matchMedia("(prefers-color-scheme: dark)");
  const apply = () => { document.body.dataset.jpThemeLight = dark.matches ? "false" : "true"; };
  apply();
  dark.addEventListener("change", apply);
}

function mountPage() {
  const view = JSON.parse(pageData("nbt-view") || "{}");
  view.visible_rows = Math.max(12, Math.floor((window.innerHeight - 260) / ROW_H));
  followSystemTheme();
  render({ model: pageModel(view), el: document.getElementById("nbt-page-view") });
}

mountPage();
