/*
  web/lab.js — the lab inside the attention player (issue 15, "A lab in the
  player"): a one-screen diagram of the whole path that follows the player
  and moves it, a caveat caption next to the maps, padding markers, lab notes
  with an export (JSON + CSV + PNG, made in the page), and a knowledge check.

  web/embed_player.py inlines this file into the page after the player's
  script (a script element at the end of the body); it must not hold a closing
  script tag or the trace slot marker. It talks to the player only through the marked hooks in
  web/player.html: window.attnflowPlayer (read-only state + go(i)) and the
  "attnflow:step" event fired after every render().

  Invariants:
   * The lab never changes the player's state except through go(i).
   * Exported numbers are the trace's own values (the player's exact():
     float32 stages print as the trace JSON's shortest float32 decimals),
     never re-rounded; -Infinity is written as the string "-Infinity", as in
     the trace format.
   * No network: downloads are Blob URLs on a temporary <a download>.
   * Answers of the knowledge check are not in the DOM before "Check answers".
*/
"use strict";
(function () {
const P = window.attnflowPlayer;
if (!P) return;  // the player did not start (template or a script error)
const $ = (id) => document.getElementById(id);
const el = (tag, attrs, ...kids) => {
  const e = document.createElement(tag);
  if (attrs) for (const [k, v] of Object.entries(attrs)) {
    if (v == null) continue;  // an absent attribute
    if (k === "class") e.className = v; else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v);
  }
  for (const k of kids) if (k != null) e.append(k);
  return e;
};
const stepIndex = (id) => P.steps.findIndex((s) => s.id === id);

// ---------------------------------------------------------------------------
// 1. The diagram: one box per player step (plus the token ids that feed step
// 1), in the order of the path, grouped as "attention" and "block".
// ---------------------------------------------------------------------------
const BOXES = [
  { key: "ids", step: "embed", label: "token ids" },
  { key: "embed", step: "embed", label: "embedding + position" },
  { key: "qkv", step: "qkv", label: "Q / K / V" },
  { key: "scores", step: "scores", label: "scores Q·Kᵀ", group: "att" },
  { key: "scaled", step: "scaled", label: "× 1/√d_k", group: "att" },
  { key: "mask", step: "mask", label: "+ mask", group: "att" },
  { key: "softmax", step: "softmax", label: "softmax", group: "att" },
  { key: "weighted", step: "weighted", label: "weighted V", group: "att" },
  { key: "concat", step: "concat", label: "concat heads" },
  { key: "wo", step: "wo", label: "W_o" },
  { key: "norm1", step: "norm1", label: "residual + norm" },
  { key: "ffn", step: "ffn", label: "FFN" },
  { key: "norm2", step: "norm2", label: "residual + norm" },
  { key: "decode", step: "decode", label: "decode: 1 row vs KV cache", group: "dec" },
];
function whyMissing(s) {
  const T = P.trace;
  if (s.id === "decode") return "No data in this trace: it has no decode steps (write one with `attnflow trace --decode-steps N`, toy or decoder).";
  return "No data in this trace: none of the stages " + P.stagesOf(s).join(", ") + " was captured" +
    (T && T.source ? " (source: " + T.source + ")" : "") + ".";
}
// The ViT and the Bahdanau loop have their own diagrams (not the block's):
// boxes that match a player step go to it, the others scroll to the view.
// { key, label, step (player step id) | view (view id), group, title }
function vitBoxes() {
  const v = P.trace.views.find((x) => x.id === "vit");
  const n = v ? v.layers : P.trace.model.num_layers || "N";
  const g = v && v.grid ? v.grid : { h: "?", w: "?" };
  const blk = "each of the " + n + " pre-norm blocks (the steps show layer " + P.trace.layer + "):";
  return [
    { key: "image", view: "vit", label: "image (square, " + (v && v.grid && v.grid.image ? v.grid.image.w + "×" + v.grid.image.h + " px" : "resized") + ")" },
    { key: "patches", view: "vit", label: g.h + "×" + g.w + " patches" },
    { key: "embed", step: "embed", label: "linear patch embedding + [CLS]" },
    { key: "pos", step: "embed", label: "+ learned positions" },
    { key: "ln1", step: "embed", label: "LayerNorm", group: blk },
    { key: "qkv", step: "qkv", label: "Q / K / V", group: blk },
    { key: "attn", step: "softmax", label: "softmax(Q·Kᵀ/√d_k)", group: blk },
    { key: "mix", step: "weighted", label: "· V, concat, W_o", group: blk },
    { key: "res1", step: "norm1", label: "+ residual", group: blk },
    { key: "mlp", step: "ffn", label: "LayerNorm → MLP (GELU)", group: blk },
    { key: "res2", step: "norm2", label: "+ residual", group: blk },
    { key: "cls", view: "vit", label: "[CLS] → patch weights (view)" },
  ];
}
function bahdanauBoxes() {
  const loop = "decoder step i:";
  return [
    { key: "src", view: "bahdanau", label: "source words x_1…x_S" },
    { key: "enc", view: "bahdanau", label: "BiGRU encoder: h_j = [→h_j ; ←h_j]" },
    { key: "s0", view: "bahdanau", label: "s_0 = tanh(W_init·←h_1 + b)" },
    { key: "energy", view: "bahdanau", label: "e_ij = vᵀ·tanh(W_s·s_{i−1} + W_h·h_j + b)", group: loop },
    { key: "alpha", view: "bahdanau", label: "α_i = softmax_j(e_i) — row i of the view", group: loop },
    { key: "context", view: "bahdanau", label: "c_i = Σ_j α_ij·h_j", group: loop },
    { key: "gru", view: "bahdanau", label: "s_i = GRU([y_{i−1} ; c_i], s_{i−1}) → y_i", group: loop },
  ];
}
function buildSystemDiagram(kind) {
  const vit = kind === "vit", boxes = vit ? vitBoxes() : bahdanauBoxes();
  const box = el("section", { id: "lab-diagram", "data-diagram": kind, "aria-label": vit ? "The ViT, one box per stage" : "The Bahdanau loop, one box per stage" },
    el("div", { class: "lab-dtitle", text: vit
      ? "The Vision Transformer, end to end — click a box to go to that step (or to the patch view)"
      : "The Bahdanau encoder–decoder: no Q·Kᵀ here — a small network scores each source state against the decoder state, once per output word (click a box for the view)" }));
  const flow = el("div", { class: "lab-flow" });
  let group = null;
  boxes.forEach((b, k) => {
    const si = b.step ? stepIndex(b.step) : -1;
    const btn = el("button", { class: "lab-box", type: "button", "data-box": b.key, "data-step": si,
      title: si >= 0 ? "Step " + (si + 1) + ": " + P.steps[si].title : "Scroll to the view" },
      el("span", { class: "lab-n", text: si >= 0 ? String(si + 1) : "▾" }), b.label);
    if (b.view) btn.dataset.view = b.view;
    btn.addEventListener("click", () => {
      if (si >= 0) P.go(si);
      else { const v = document.getElementById("view-" + b.view); if (v) v.scrollIntoView({ block: "start" }); }
    });
    if ((b.group || null) !== (group && group.dataset.g)) {
      group = b.group ? el("span", { class: "lab-group", "data-g": b.group },
        el("span", { class: "lab-group-label", id: b.group === "decoder step i:" ? "lab-loop-label" : null, text: b.group })) : null;
      if (k) flow.append(el("span", { class: "lab-arrow", text: "→" }));
      if (group) flow.append(group);
    } else if (k) (group || flow).append(el("span", { class: "lab-arrow", text: "→" }));
    (group || flow).append(btn);
  });
  if (!vit) flow.append(el("span", { class: "lab-arrow", text: "⟲ next i" }));
  box.append(flow);
  if (!vit) box.append(el("div", { class: "lab-dtitle", text:
    "Without attention the decoder would get one fixed vector (the encoder's last state) for the whole sentence; here every output step reads a fresh mix c_i of all the h_j." }));
  return box;
}
// The loop label of the Bahdanau diagram follows the view's decoder step.
function followLoop() {
  const lab = $("lab-loop-label"), v = P.trace && P.trace.views.find((x) => x.id === "bahdanau");
  if (!lab || !v) return;
  const i = P.vstate[v.id] ? P.vstate[v.id].step : 0;
  lab.textContent = "decoder step i = " + (i + 1) + " of " + v.dr + " (output ‘" + v.rowLabels[i] + "’):";
}
function buildDiagram() {
  const src = P.trace.source;
  if (src === "vit" || src === "bahdanau") return buildSystemDiagram(src);
  const box = el("section", { id: "lab-diagram", "data-diagram": "block", "aria-label": "The whole path, one box per step" },
    el("div", { class: "lab-dtitle", text: "The path through one block — click a box to go to that step (dashed: no data in this trace)" }));
  const flow = el("div", { class: "lab-flow" });
  let group = null;
  BOXES.forEach((b, k) => {
    const si = stepIndex(b.step), s = P.steps[si];
    const ok = b.key === "ids" ? P.trace.tokens.length > 0 : P.stepAvailable(s);
    const btn = el("button", { class: "lab-box", type: "button", "data-box": b.key, "data-step": si,
      title: ok ? "Step " + (si + 1) + ": " + s.title : whyMissing(s) },
      el("span", { class: "lab-n", text: b.key === "ids" ? "in" : String(si + 1) }), b.label);
    if (!ok) { btn.classList.add("lab-disabled"); btn.setAttribute("aria-disabled", "true"); }
    else btn.addEventListener("click", () => P.go(si));
    const g = b.group || null;
    if (g !== (group && group.dataset.g)) {
      group = g ? el("span", { class: "lab-group", "data-g": g },
        el("span", { class: "lab-group-label", text: g === "att" ? "attention, per head:" : "generation:" })) : null;
      if (group) flow.append(k ? el("span", { class: "lab-arrow", text: g === "dec" ? "⟲" : "→" }) : null, group);
      else if (k) flow.append(el("span", { class: "lab-arrow", text: "→" }));
    } else if (k) (group || flow).append(el("span", { class: "lab-arrow", text: "→" }));
    (group || flow).append(btn);
  });
  box.append(flow);
  return box;
}
function highlight() {
  const cur = P.step;
  document.querySelectorAll("#lab-diagram .lab-box").forEach((b) => {
    const on = +b.dataset.step === cur && (!P.trace || P.trace.stages.weights);
    b.classList.toggle("lab-current", on);
    if (on) b.setAttribute("aria-current", "step"); else b.removeAttribute("aria-current");
  });
}

// ---------------------------------------------------------------------------
// 2. Padding: a key is padding when the trace says so ("padding": {"keys":
// [...]} — an optional field), when its token is a pad token, or when every
// query of every head masks it (a causal mask always leaves the diagonal).
// ---------------------------------------------------------------------------
const PAD_TEXT = new Set(["[PAD]", "<pad>", "<|pad|>", "<PAD>"]);
function padKeys() {
  const T = P.trace, out = new Set();
  const raw = T.raw && T.raw.padding;
  if (raw && Array.isArray(raw.keys)) raw.keys.forEach((j) => { if (Number.isInteger(j)) out.add(j); });
  T.tokens.forEach((t, i) => { if (PAD_TEXT.has(t.text)) out.add(i); });
  const M = T.stages.masked, W = T.stages.weights;
  if (M && W && M.pool[1] === 1 && M.pool[2] === 1 && M.ds.join() === W.ds.join()) {
    for (let j = 0; j < M.ds[2]; j++) {
      let all = true;
      for (let h = 0; h < M.ds[0] && all; h++) for (let i = 0; i < M.ds[1]; i++)
        if (P.at(M, h, i, j) !== -Infinity) { all = false; break; }
      if (all) out.add(j);
    }
  }
  return [...out].sort((a, b) => a - b);
}
let PAD = [];
function markPadding() {
  const legend = $("lab-pad-legend");
  legend.hidden = PAD.length === 0;
  if (!PAD.length) return;
  legend.replaceChildren(el("span", { class: "lab-pad-sw" }),
    "padding (" + PAD.length + " key" + (PAD.length > 1 ? "s" : "") + ": " + PAD.join(", ") +
    ") — not a real token: every query masks it, so its weight is exactly 0; in the maps its column is outlined in red");
  const pool = P.trace.stages.weights.pool[1];
  if (pool !== 1) return;  // pooled chips hold several tokens
  for (const j of PAD) {
    const chip = document.querySelector("#tokens .tok[data-index='" + j + "']");
    if (chip) { chip.classList.add("lab-pad"); chip.title = "padding key " + j + " (masked for every query)"; chip.dataset.pad = "1"; }
  }
  // Outline the pad columns on the square maps ([query × key] canvases).
  document.querySelectorAll("#figure canvas[id^='map-'], #figure canvas[id^='decode-map-']").forEach((cv) => {
    const g = ["left", "top", "cw", "ch", "rows", "cols"].map((k) => +cv.dataset[k]);
    const [left, top, cw, ch, rows, cols] = g;
    if (!(cw >= 2)) return;
    const ctx = cv.getContext("2d");
    ctx.save(); ctx.strokeStyle = "#cf222e"; ctx.lineWidth = 2; ctx.setLineDash([4, 3]);
    for (const j of PAD) if (j < cols) ctx.strokeRect(left + j * cw + 1, top + 1, cw - 2, rows * ch - 2);
    ctx.restore();
    cv.dataset.padCols = PAD.filter((j) => j < cols).join(",");
  });
}

// ---------------------------------------------------------------------------
// 3. Notes and export.
// ---------------------------------------------------------------------------
// A key for localStorage: FNV-1a over what identifies the trace.
function traceKey() {
  const T = P.trace;
  let h = 0x811c9dc5;
  const add = (s) => { for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 0x01000193) >>> 0; } };
  add([T.model.name || "", T.source, T.layer, T.causal, T.scale, T.heads.join(","), T.decode.length].join("|"));
  add(T.tokens.map((t) => t.id).join(","));
  // A views-only page (e.g. the Bahdanau loop) has no pipeline stages.
  const w = T.stages.weights ? T.stages.weights.data : [], step = Math.max(1, Math.floor(w.length / 4096));
  for (let i = 0; i < w.length; i += step) add(String(w[i]));
  return "attnflow-lab-notes:" + (h >>> 0).toString(16).padStart(8, "0");
}
let KEY = null;
function storage() { try { return window.localStorage; } catch (e) { return null; } }
function loadNotes() {
  const ls = storage(), box = $("lab-notes-text");
  box.value = ls ? ls.getItem(KEY) || "" : "";
  $("lab-notes-state").textContent = ls ? "saved in this browser (localStorage, key " + KEY + ")" : "localStorage is not available here: notes are not kept";
}
function saveNotes() {
  const ls = storage(); if (!ls) return;
  try { ls.setItem(KEY, $("lab-notes-text").value); $("lab-notes-state").textContent = "saved in this browser (localStorage, key " + KEY + ")"; }
  catch (e) { $("lab-notes-state").textContent = "could not save: " + e.message; }
}
// The numbers of the current step: {stage: {axes, shape, pool, head, rows: [[...]]}}
// for the head on screen. Values as the trace JSON writes them.
const val = (v, f32) => { const s = P.exact(v, f32); return s === "-Infinity" || s === "Infinity" || s === "NaN" ? s : Number(s); };
function stageMatrix(st, a) {
  const rows = [];
  for (let i = 0; i < st.ds[1]; i++) {
    const r = [];
    for (let j = 0; j < st.ds[2]; j++) r.push(val(P.at(st, a, i, j), st.f32));
    rows.push(r);
  }
  return rows;
}
function headIndexFor(st) {
  const T = P.trace, hi = P.state.head;
  if (st.rank === 2) return 0;
  if (st.axes[0] === "kv_head") return Math.floor(T.heads[hi] / (T.model.num_heads / (T.model.num_kv_heads || T.model.num_heads)));
  return hi;
}
function currentData() {
  const T = P.trace, s = P.steps[P.step], hi = P.state.head;
  const out = { stages: {}, primary: null };
  if (s.id === "decode") {
    const D = T.decode;
    if (!D.length) return out;
    const k = Math.min(P.state.dstep, D.length - 1), d = D[k];
    out.decode = { index: k, position: d.position, kv_len: d.kv_len, token: d.token };
    for (const n of P.mapStages) {
      const st = d.stages[n]; if (!st) continue;
      out.stages[n] = { axes: st.axes, shape: st.shape.slice(3 - st.rank), pool: st.pool.slice(3 - st.rank),
                        head: T.heads[hi], rows: stageMatrix(st, hi), st };
    }
    out.primary = out.stages.weights ? "weights" : Object.keys(out.stages)[0] || null;
    return out;
  }
  const names = P.stagesOf(s).filter((n) => T.stages[n]);
  for (const n of names) {
    const st = T.stages[n], a = headIndexFor(st);
    out.stages[n] = { axes: st.axes, shape: st.shape.slice(3 - st.rank), pool: st.pool.slice(3 - st.rank),
                      head: st.rank === 3 ? (st.axes[0] === "kv_head" ? a : T.heads[hi]) : null, rows: stageMatrix(st, a), st };
  }
  if (s.map && out.stages[s.map]) out.primary = s.map;
  else out.primary = s.primary.find((n) => out.stages[n]) || names[0] || null;
  return out;
}
function stem() {
  const T = P.trace, s = P.steps[P.step];
  const name = (T.model.name || "trace").replace(/[^A-Za-z0-9._-]+/g, "_");
  return "attnflow-lab_" + name + "_L" + T.layer + "_step" + (P.step + 1) + "-" + s.id + "_head" + T.heads[P.state.head];
}
function download(blob, name) {
  const url = URL.createObjectURL(blob);
  const a = el("a", { href: url, download: name, style: "display:none" });
  // The link stays in the page a while: removing it (or revoking the URL) at
  // once can drop the download in Chromium.
  document.body.append(a); a.click();
  setTimeout(() => { a.remove(); URL.revokeObjectURL(url); }, 60000);
}
function tokenLabel(i) { return i < P.trace.tokens.length ? P.tokText(i) : ""; }
function exportJson() {
  const T = P.trace, s = P.steps[P.step], d = currentData();
  const stages = {};
  for (const [n, x] of Object.entries(d.stages)) stages[n] = { axes: x.axes, shape: x.shape, pool: x.pool, head: x.head, rows: x.rows };
  const doc = {
    format: "attnflow-lab-notes/1",
    notes: $("lab-notes-text").value,
    trace: { key: KEY, model: T.model.name || "", source: T.source, layer: T.layer, causal: T.causal, scale: T.scale,
             seq_len: T.tokens.length, heads: T.heads, tokens: T.tokens, padding_keys: PAD },
    step: { index: P.step, number: P.step + 1, id: s.id, title: s.title, head: T.heads[P.state.head],
            query: P.state.query, primary: d.primary },
    decode: d.decode || null,
    stages,
  };
  download(new Blob([JSON.stringify(doc, null, 1)], { type: "application/json" }), stem() + ".json");
}
function csvCell(v) { const s = typeof v === "number" ? String(v) : String(v); return /[",\n]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s; }
function exportCsv() {
  const d = currentData();
  if (!d.primary) { $("lab-export-state").textContent = "this step has no data to export"; return; }
  const x = d.stages[d.primary], st = x.st, p1 = st.pool[1], p2 = st.pool[2];
  const isKey = st.axes[st.rank - 1] === "key";
  const colName = (j) => (isKey ? (p2 === 1 ? j + " " + tokenLabel(j) : j * p2 + "-" + (Math.min(st.shape[2], (j + 1) * p2) - 1)) : "d" + j);
  const rowName = (i) => (P.steps[P.step].id === "decode" ? "new token" : p1 === 1 ? i + " " + tokenLabel(i) : i * p1 + "-" + (Math.min(st.shape[1], (i + 1) * p1) - 1));
  const lines = [[d.primary + (x.head != null ? " head " + x.head : "")].concat(x.rows[0] ? x.rows[0].map((_, j) => colName(j)) : []).map(csvCell).join(",")];
  x.rows.forEach((r, i) => lines.push([rowName(i)].concat(r).map(csvCell).join(",")));
  download(new Blob([lines.join("\n") + "\n"], { type: "text/csv" }), stem() + "_" + d.primary + ".csv");
}
function currentCanvas() {
  const s = P.steps[P.step], hi = P.state.head;
  if (s.map) { const c = $("map-" + s.map + "-" + hi); if (c) return c; }
  if (s.id === "decode") { const c = $("decode-map-" + hi); if (c) return c; }
  return document.querySelector("#figure canvas:not(.sumbar)");
}
function exportPng() {
  const cv = currentCanvas();
  if (!cv) { $("lab-export-state").textContent = "this step draws no map"; return; }
  // Synchronous (toDataURL, not toBlob): the download starts inside the click,
  // which Chromium requires of a download that is not the page's first.
  const bin = atob(cv.toDataURL("image/png").split(",")[1]), bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  download(new Blob([bytes], { type: "image/png" }), stem() + (cv.id ? "_" + cv.id : "") + ".png");
}

// ---------------------------------------------------------------------------
// 4. The knowledge check (answers live here, in JS, until "Check answers").
// ---------------------------------------------------------------------------
const QUIZ = [
  { q: "Why are the scores divided by √d_k before the softmax?",
    choices: [
      ["So that every row of weights sums to 1.",
       "No: the softmax makes every row sum to 1 whatever the scale. Scaling changes how peaked the row is, not its sum."],
      ["q·k sums d_k terms, so its variance grows like d_k; dividing by √d_k keeps it near 1 and the softmax out of saturation.",
       "Right: for roughly independent unit-variance entries, var(q·k) ≈ d_k, so its spread grows like √d_k. Without the scale, larger heads give sharper rows that saturate into a near one-hot with vanishing gradients (exercise 1 of the lab measures it)."],
      ["To save arithmetic: smaller numbers are cheaper to exponentiate.",
       "No: it is one extra multiply per score (often folded into W_q); exp costs the same for any finite input."],
      ["So that attention does not depend on how many keys there are.",
       "No: the factor depends on d_k only, not on kv_len; with more keys the weights still spread over more entries."],
    ], answer: 1 },
  { q: "A decoder has 3 tokens in its KV cache and now feeds 2 new queries (q_len 2, kv_len 5). Which causal mask is right?",
    choices: [
      ["top_left: query i reads keys j ≤ i, so the two queries read keys 0 and 0–1.",
       "No: top_left lines the first query up with the first key. Here the queries are positions 3 and 4, so they would lose the cache and see the wrong keys."],
      ["Either: the mask multiplies future weights by 0 after the softmax, so alignment does not matter.",
       "No on both counts: the mask sets future scores to −∞ before the softmax (weights exactly 0, the rest renormalised — zeroing after it would leave rows that do not sum to 1), and the alignment decides which keys are 'future'."],
      ["No mask is needed once the tokens are in the cache.",
       "No: without it, a query would read the later new token in the same pass (position 3 would read position 4)."],
      ["bottom_right: query i reads keys j ≤ i + (kv_len − q_len), so the queries read keys 0–3 and 0–4.",
       "Right: the last query lines up with the last key; every query sees the whole cache and itself, never a later position."],
    ], answer: 3 },
  { q: "A prompt of n tokens is followed by m generated tokens with a KV cache. Which describes the cost?",
    choices: [
      ["Each decode step recomputes K and V for the whole sequence.",
       "No: that is generation without a cache. The cache keeps K and V of earlier positions, so a step computes them only for the new token."],
      ["Decode steps can run in parallel like prefill, since the cache is known.",
       "No: step t+1 needs the token chosen at step t as its input, so steps are sequential."],
      ["Prefill computes all n query rows at once (n × n scores per head, large matrix products, compute-bound); each decode step computes one query row against the t cached keys (about t·d_k work) but must read the whole cache, and it waits for the previous token.",
       "Right: prefill is parallel over the prompt; decode is sequential over tokens and each step is a matrix-vector product, limited by memory bandwidth (reading K and V)."],
      ["Prefill costs O(n) and each decode step O(n²).",
       "No: it is the other way round: prefill scores are O(n² · d_k) per head; a decode step is O(t · d_k)."],
    ], answer: 2 },
];
function buildQuiz() {
  const sec = el("section", { id: "lab-quiz" }, el("h2", { text: "Knowledge check" }),
    el("div", { class: "lab-muted", text: "Pick one answer per question, then check. Each choice is explained after you submit." }));
  QUIZ.forEach((item, qi) => {
    const q = el("div", { class: "lab-q", "data-q": qi }, el("p", { text: (qi + 1) + ". " + item.q }));
    item.choices.forEach((c, ci) => q.append(el("label", { "data-choice": ci },
      el("input", { type: "radio", name: "lab-q" + qi, value: String(ci) }), " " + c[0])));
    sec.append(q);
  });
  const submit = el("button", { id: "lab-quiz-submit", type: "button", text: "Check answers" });
  const reset = el("button", { id: "lab-quiz-reset", type: "button", text: "Try again", hidden: "" });
  const score = el("span", { id: "lab-quiz-score" });
  submit.addEventListener("click", () => {
    let right = 0;
    QUIZ.forEach((item, qi) => {
      const q = sec.querySelector(".lab-q[data-q='" + qi + "']");
      const picked = q.querySelector("input:checked");
      const p = picked ? +picked.value : -1;
      if (p === item.answer) right++;
      q.dataset.result = p === item.answer ? "right" : p < 0 ? "unanswered" : "wrong";
      q.querySelectorAll("label").forEach((lab) => {
        const ci = +lab.dataset.choice, ok = ci === item.answer;
        lab.classList.toggle("lab-right", ok);
        lab.classList.toggle("lab-wrong", ci === p && !ok);
        lab.querySelector("input").disabled = true;
        lab.after(el("div", { class: "lab-expl", "data-choice": ci },
          el("b", { text: (ok ? "✓ right" : "✗ wrong") + (ci === p ? " (your answer)" : "") + ": " }), item.choices[ci][1]));
      });
    });
    score.textContent = right + " of " + QUIZ.length + " right";
    submit.disabled = true; reset.hidden = false;
  });
  reset.addEventListener("click", () => {
    sec.querySelectorAll(".lab-expl").forEach((e) => e.remove());
    sec.querySelectorAll("label").forEach((l) => { l.classList.remove("lab-right", "lab-wrong"); const i = l.querySelector("input"); i.disabled = false; i.checked = false; });
    sec.querySelectorAll(".lab-q").forEach((q) => delete q.dataset.result);
    score.textContent = ""; submit.disabled = false; reset.hidden = true;
  });
  sec.append(el("div", { class: "lab-row" }, submit, reset, score));
  return sec;
}

// ---------------------------------------------------------------------------
// Wiring.
// ---------------------------------------------------------------------------
function buildStatic() {
  const main = document.querySelector("#app main");
  main.prepend(el("div", { id: "lab-diagram-slot" }));
  const fig = $("figure");
  fig.before(el("p", { id: "lab-caveat", role: "note",
    text: "Read these maps with care: attention weights show where each query reads from, not why the model outputs what it does — they are not causal explanations. And a head need not do one human-nameable job." }),
    el("div", { id: "lab-pad-legend", hidden: "" }));
  main.prepend(el("div", { id: "lab-batch", hidden: "" }));
  const notes = el("section", { id: "lab-notes" }, el("h2", { text: "Lab notes" }),
    el("textarea", { id: "lab-notes-text", placeholder: "What did you see at this step? (kept in this browser for this trace)", spellcheck: "true" }),
    el("div", { class: "lab-muted", id: "lab-notes-state" }),
    el("div", { class: "lab-row" }, "Export the notes with the current step's data:",
      el("button", { id: "lab-export-json", type: "button", text: "JSON (notes + numbers)", onclick: exportJson }),
      el("button", { id: "lab-export-csv", type: "button", text: "CSV (this map)", onclick: exportCsv }),
      el("button", { id: "lab-export-png", type: "button", text: "PNG (this map)", onclick: exportPng })),
    el("div", { class: "lab-muted", id: "lab-export-state", text: "Files are made in this page (no server): the head and decode step on screen are the ones exported." }));
  const ta = notes.querySelector("textarea");
  ta.addEventListener("input", saveNotes);
  ta.addEventListener("keydown", (ev) => ev.stopPropagation());  // arrows edit text, not the player
  main.append(el("div", { id: "lab" }, notes, buildQuiz()));
}
// A padded batch ("batch" with "pages", attnflow trace --sentences): one
// button per sentence; choosing one opens that sentence's page (which keeps
// the pages, so the picker stays).
function buildBatchPicker() {
  const box = $("lab-batch"), B = P.trace.batch;
  box.hidden = !(B && B.pages);
  if (box.hidden) { box.replaceChildren(); return; }
  const row = el("div", { class: "lab-row" }, el("b", { text: "Batch of " + B.sentences.length + " sentences, one padded forward pass — sentence:" }));
  B.sentences.forEach((text, i) => {
    const real = B.pages[i].seq_len - ((B.pages[i].padding && B.pages[i].padding.keys.length) || 0);
    row.append(el("button", { type: "button", class: "lab-sent" + (i === B.index ? " lab-on" : ""), "data-index": i,
      title: real + " real tokens, padded to " + B.pages[i].seq_len,
      text: (i + 1) + ": " + (text.length > 40 ? text.slice(0, 39) + "…" : text),
      onclick: () => {
        if (i === P.trace.batch.index) return;
        const page = Object.assign({}, B.pages[i]);
        page.batch = Object.assign({}, B.pages[i].batch, { pages: B.pages });
        P.open(JSON.stringify(page), "sentence " + (i + 1) + " of the batch");
      } }));
  });
  box.replaceChildren(row, el("div", { class: "lab-muted",
    text: "Every sentence is padded with [PAD] to the longest (" + B.pages[0].seq_len + " tokens); the attention mask (kv_lens) gives pad keys weight exactly 0, so a real token's output equals the sentence run alone." }));
}
function onTrace() {
  // A new trace (the inlined one, or a file opened with the button).
  buildBatchPicker();
  $("lab-diagram-slot").replaceChildren(buildDiagram());
  KEY = traceKey(); PAD = padKeys();
  loadNotes();
}
let shown = null;
function onStep() {
  if (!P.trace) return;
  if (shown !== P.trace) { shown = P.trace; onTrace(); }
  highlight(); markPadding();
}
buildStatic();
document.addEventListener("attnflow:step", onStep);
document.addEventListener("attnflow:views", () => { if (P.trace && shown !== P.trace) onStep(); followLoop(); });
onStep();
followLoop();
})();
