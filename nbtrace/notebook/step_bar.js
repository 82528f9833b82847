// TraceView's step picker, for several forwards (each step of generate). Shipped in front of
// trace_view.js (see view.py), which mounts it into its bar. The kernel sends the per-step facts
// as JSON in the `steps` trait (nbtrace/notebook/steps_source.py); `step` is synced both ways, and a
// new step's tree arrives as a new payload.

/** "step 3 of 100 · 1 position fed · picked 42": what the bar says about step `k`. */
export function stepLabel(facts, k) {
  const parts = [`step ${k} of ${facts.n}`];
  const fed = facts.input[k];
  if (fed !== null && fed !== undefined) parts.push(`${fed} position${fed === 1 ? "" : "s"} fed`);
  const a = facts.token[k];
  if (facts.b_token) {
    const b = facts.b_token[k];
    if (a || b) parts.push(a === b ? `both picked ${a}` : `a picked ${a || "?"}, b ${b || "?"}`);
  } else if (a) {
    parts.push(`picked ${a}`);
  }
  if (facts.status) {
    const word = facts.words[facts.status[k]] || facts.status[k];
    parts.push(facts.where[k] ? `${word}: ${facts.where[k]}` : word);
  }
  return parts.join(" · ");
}

function mountStepBar(bar, model) {
  let facts = null;
  let cells = [];
  let current = -1;
  const make = (tag, className, text) => {
    const node = document.createElement(tag);
    node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  };
  const prev = make("button", "nbt-step-go", "◀");
  const next = make("button", "nbt-step-go", "▶");
  prev.title = "previous step (←)";
  next.title = "next step (→)";
  const label = make("span", "nbt-step-label");
  const strip = make("div", "nbt-step-strip");
  strip.setAttribute("role", "listbox");
  strip.setAttribute("aria-label", "steps");
  bar.tabIndex = 0;
  bar.setAttribute("data-lm-suppress-shortcuts", "true");

  function build() {
    const raw = model.get("steps");
    facts = raw ? JSON.parse(raw) : null;
    if (!facts || !facts.n) {
      bar.hidden = true;
      bar.replaceChildren();
      cells = [];
      return;
    }
    bar.hidden = false;
    cells = [];
    const items = [];
    for (let k = 0; k < facts.n; k++) {
      const cell = make("span", "nbt-step");
      cell.dataset.step = String(k);
      cell.setAttribute("role", "option");
      if (facts.status) cell.classList.add(`nbt-step-${facts.status[k]}`);
      if (facts.input[k] > 1) cell.classList.add("nbt-step-long");
      cell.title = stepLabel(facts, k);
      cells.push(cell);
      items.push(cell);
    }
    strip.replaceChildren(...items);
    bar.replaceChildren(prev, next, label, strip);
    current = -1;
    highlight();
  }

  function highlight() {
    if (!facts) return;
    const k = Math.max(0, Math.min(facts.n - 1, model.get("step") || 0));
    if (current >= 0 && cells[current]) {
      cells[current].classList.remove("nbt-step-on");
      cells[current].setAttribute("aria-selected", "false");
    }
    current = k;
    cells[k].classList.add("nbt-step-on");
    cells[k].setAttribute("aria-selected", "true");
    label.textContent = stepLabel(facts, k);
    prev.disabled = k === 0;
    next.disabled = k === facts.n - 1;
  }

  function go(k) {
    if (!facts) return;
    k = Math.max(0, Math.min(facts.n - 1, k));
    if (k === current) return;
    model.set("step", k);
    model.save_changes();
    highlight();
  }

  const onStrip = (event) => {
    const cell = event.target.closest(".nbt-step");
    if (cell) go(Number(cell.dataset.step));
  };
  const onKey = (event) => {
    const moves = { ArrowLeft: current - 1, ArrowRight: current + 1, Home: 0, End: facts ? facts.n - 1 : 0 };
    if (!(event.key in moves)) return;
    event.preventDefault();
    event.stopPropagation();
    go(moves[event.key]);
  };
  const onPrev = () => go(current - 1);
  const onNext = () => go(current + 1);
  strip.addEventListener("click", onStrip);
  bar.addEventListener("keydown", onKey);
  prev.addEventListener("click", onPrev);
  next.addEventListener("click", onNext);
  model.on("change:steps", build);
  model.on("change:step", highlight);
  build();
  return () => {
    model.off("change:steps", build);
    model.off("change:step", highlight);
  };
}
