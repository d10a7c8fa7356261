// nanscope CLI — report_page.hpp: the fixed parts of the HTML page `nanscope report` writes (inline CSS and
// JavaScript; the data goes in between as JSON, see report.hpp). The script renders every name with textContent
// or setAttribute only, never as markup.
#ifndef NANSCOPE_CLI_REPORT_PAGE_HPP
#define NANSCOPE_CLI_REPORT_PAGE_HPP

#include <cstddef>
#include <stdexcept>
#include <string>

namespace nanscope_report {

inline constexpr const char* page_head = R"NSHTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>nanscope report</title>
<style>
:root { --bad: #c62828; --warn: #ef6c00; --ok: #2e7d32; --muted: #666; --line: #ddd; --hl: #fff3c4; }
* { box-sizing: border-box; }
body { font: 13px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #222; background: #fafafa; }
header { background: #263238; color: #fff; padding: 10px 18px; }
header h1 { font-size: 17px; margin: 0 0 2px 0; }
header .inputs { color: #b0bec5; font-size: 12px; word-break: break-all; }
main { padding: 10px 18px 30px; }
section { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 10px 14px; margin: 10px 0; }
section h2 { font-size: 14px; margin: 0 0 8px 0; }
#summary .verdict { font-size: 15px; font-weight: 600; }
#summary .verdict.bad { color: var(--bad); }
#summary .verdict.ok { color: var(--ok); }
a.jump { color: #1565c0; cursor: pointer; text-decoration: underline; }
.notes { color: var(--warn); margin: 4px 0 0 0; padding-left: 18px; }
.stats { color: var(--muted); }
.toolbar { display: flex; gap: 10px; align-items: center; flex-wrap: wrap; margin-bottom: 6px; }
.toolbar input[type=search] { width: 320px; padding: 3px 6px; }
.thead, .row { display: grid; grid-template-columns: minmax(260px, 1fr) 56px 56px 56px 84px repeat(4, 92px); gap: 6px; align-items: center; }
.thead { font-weight: 600; color: var(--muted); border-bottom: 1px solid var(--line); padding: 2px 0; font-size: 12px; }
.row { padding: 1px 0; border-bottom: 1px solid #f1f1f1; cursor: default; }
.row:hover { background: #f5f9ff; }
.row.sel { background: #e3f2fd; }
.row.first { background: var(--hl); outline: 2px solid var(--bad); }
.row.diff-producer { background: #fde0dc; outline: 2px solid #ad1457; }
.row.diff-first { box-shadow: inset 4px 0 0 #ad1457; }
.row.diff-diverged .name { color: #ad1457; }
.row.checkpoint .label { font-style: italic; color: #4e342e; }
.row.producer { box-shadow: inset -4px 0 0 var(--bad); }
.badge { display: inline-block; margin-left: 6px; padding: 0 4px; border-radius: 3px; font-size: 10px; color: #fff; background: var(--bad); }
.badge.det { background: #6a1b9a; }
#summary .detection { margin-top: 4px; }
#summary .producer-line { margin-top: 2px; color: #333; }
.name { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px; }
.tog { display: inline-block; width: 14px; color: var(--muted); cursor: pointer; user-select: none; }
.num { text-align: right; font-variant-numeric: tabular-nums; font-size: 12px; }
.num.bad { color: var(--bad); font-weight: 700; }
.num.none { color: #bbb; }
.sub-bad { color: var(--bad); font-size: 10px; margin-left: 4px; }
.bar { position: relative; height: 12px; background: #eceff1; border-radius: 2px; font-size: 10px; }
.bar > i { position: absolute; left: 0; top: 0; bottom: 0; border-radius: 2px; background: #66bb6a; }
.bar > i.low { background: #ffa726; }
.bar > i.over { background: var(--bad); width: 100% !important; }
.bar > b { position: relative; padding-left: 3px; font-weight: 400; color: #222; }
.more { margin: 2px 0 2px 30px; font-size: 12px; }
#details table, #diff table { border-collapse: collapse; font-size: 12px; }
#details td, #details th, #diff td, #diff th { border-bottom: 1px solid #eee; padding: 2px 8px; text-align: left; }
#details td.n { text-align: right; font-variant-numeric: tabular-nums; }
#search-results { max-height: 240px; overflow: auto; font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px; }
#search-results div { cursor: pointer; padding: 1px 0; }
#search-results div:hover { background: #f5f9ff; }
#heatmap-box { overflow: auto; max-height: 620px; }
svg text { font: 11px ui-monospace, Menlo, Consolas, monospace; }
footer { color: var(--muted); font-size: 11px; padding: 0 18px 18px; }
</style>
</head>
<body data-ready="0">
<header><h1>nanscope report</h1><div class="inputs" id="inputs"></div></header>
<main>
<section id="summary"><h2>Summary</h2><div id="summary-body"></div></section>
<section id="diff" hidden><h2>Diff</h2><div id="diff-body"></div></section>
<section id="tree-section">
<h2>Layer tree</h2>
<div class="toolbar">
<label>Tree <select id="tree-select"></select></label>
<input type="search" id="search" placeholder="search module path (substring)">
<label><input type="checkbox" id="only-bad"> only NaN/Inf</label>
<button id="expand-all" type="button">expand all</button>
<button id="collapse-all" type="button">collapse</button>
<span class="stats" id="tree-stats"></span>
</div>
<div id="search-results"></div>
<div class="thead"><span>module</span><span class="num">NaN</span><span class="num">+Inf</span><span class="num">&minus;Inf</span><span class="num">|x| max</span><span>fp16</span><span>bf16</span><span>fp8 e4m3</span><span>fp8 e5m2</span></div>
<div id="tree"></div>
</section>
<section id="details" hidden><h2>Tensors of <span id="details-name"></span></h2><div id="details-body"></div></section>
<section id="heatmaps" hidden><h2>log2 |x| max by step</h2><div id="heatmaps-body"></div></section>
</main>
<footer id="footer"></footer>
<script type="application/json" id="nanscope-data">)NSHTML";

inline constexpr const char* page_tail = R"NSHTML(</script>
<script>
"use strict";
(function () {
const T0 = performance.now();
const D = JSON.parse(document.getElementById("nanscope-data").textContent);
const $ = (id) => document.getElementById(id);
const el = (tag, cls, text) => {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
};
const SVGNS = "http://www.w3.org/2000/svg";
const sv = (tag, attrs) => {
  const e = document.createElementNS(SVGNS, tag);
  for (const k in attrs) e.setAttribute(k, String(attrs[k]));
  return e;
};
const num = (v) => (v === "inf" ? Infinity : v === "-inf" ? -Infinity : v === null || v === undefined ? NaN : v);
const FORMATS = D.formats; // [name, max]
const fmtNum = (x) => {
  if (Number.isNaN(x)) return "";
  if (!Number.isFinite(x)) return x > 0 ? "inf" : "-inf";
  if (x === 0) return "0";
  const a = Math.abs(x);
  return a >= 1e4 || a < 1e-3 ? x.toExponential(2) : String(Number(x.toPrecision(4)));
};
// counts: -2 unknown, -1 present (no count), else the count
const addCount = (a, b) => (a === -2 ? b : b === -2 ? a : a === -1 || b === -1 ? (a > 0 || b > 0 || a === -1 || b === -1 ? -1 : 0) : a + b);
const countText = (c) => (c === -2 ? "" : c === -1 ? "yes" : String(c));
const isBad = (c) => c === -1 || c > 0;

$("inputs").textContent = D.inputs.join("  \u00b7  ");

// ------------------------------------------------------------------ per tree: structure and aggregates
const prepared = [];
function prepare(ti) {
  if (prepared[ti]) return prepared[ti];
  const t = D.trees[ti], N = t.nodes.length;
  const kids = new Array(N);
  const nan = new Array(N), pinf = new Array(N), ninf = new Array(N), amax = new Float64Array(N), subBad = new Uint8Array(N);
  const depth = new Int32Array(N);
  for (let i = 0; i < N; i++) {
    const n = t.nodes[i], p = n[0];
    if (p >= 0) { (kids[p] || (kids[p] = [])).push(i); depth[i] = depth[p] + 1; }
    let a = -2, b = -2, c = -2, m = NaN, own = n[2].some((x) => x[3] === 0);
    for (const x of n[2]) {
      if (own && x[3] !== 0) continue; // a node's health is its outputs' (its inputs when it has no output)
      a = addCount(a, x[4]); b = addCount(b, x[5]); c = addCount(c, x[6]);
      const v = num(x[7]);
      if (!Number.isNaN(v) && !(v <= m)) m = v;
    }
    nan[i] = a; pinf[i] = b; ninf[i] = c; amax[i] = m;
  }
  for (let i = N - 1; i >= 0; i--) {
    if (isBad(nan[i]) || isBad(pinf[i]) || isBad(ninf[i])) subBad[i] = 1;
    const p = t.nodes[i][0];
    if (p >= 0 && subBad[i]) subBad[p] = 1;
  }
  const lower = t.nodes.map((n) => String(n[1]).toLowerCase());
  return (prepared[ti] = { t, N, kids, nan, pinf, ninf, amax, subBad, depth, lower });
}

// ------------------------------------------------------------------ tree rendering (lazy)
const PAGE = 1000;          // children rendered per "show more"
const EXPAND_ALL_MAX = 3000; // trees up to this size open fully; larger ones show the root's children only
let cur = -1, P = null, rowOf = new Map(), childBox = new Map(), marks = new Map(), selRow = null;

function shortName(i) {
  const n = P.t.nodes[i], p = n[0];
  if (n[3] && n[3].checkpoint !== undefined) return "checkpoint \u201c" + String(n[3].checkpoint) + "\u201d";
  const s = String(n[1]);
  if (p < 0) return s;
  const ps = String(P.t.nodes[p][1]);
  return s.length > ps.length + 1 && s.startsWith(ps) && s[ps.length] === "." ? s.slice(ps.length + 1) : s;
}
function headroomBar(m, fi) {
  const box = el("div", "bar");
  const fill = el("i");
  const max = FORMATS[fi][1];
  let label = "";
  if (Number.isNaN(m)) { label = ""; fill.style.width = "0"; }
  else if (m === 0) { label = "all 0"; fill.style.width = "100%"; }
  else {
    const h = Math.log2(max / m);
    if (h < 0 || !Number.isFinite(m)) { fill.className = "over"; label = Number.isFinite(m) ? "overflow " + h.toFixed(1) + "b" : "inf"; }
    else { fill.style.width = Math.min(100, (h / 16) * 100) + "%"; if (h < 2) fill.className = "low"; label = "+" + h.toFixed(1) + "b"; }
  }
  box.appendChild(fill);
  box.appendChild(el("b", null, label));
  box.title = FORMATS[fi][0] + " headroom: log2(" + max + " / |x|max)";
  return box;
}
function makeRow(i) {
  const r = el("div", "row");
  r.dataset.node = i;
  r.dataset.path = P.t.nodes[i][1];
  r.dataset.nan = P.nan[i]; r.dataset.posInf = P.pinf[i]; r.dataset.negInf = P.ninf[i];
  r.dataset.absMax = Number.isNaN(P.amax[i]) ? "" : String(P.amax[i]);
  const name = el("span", "name");
  name.style.paddingLeft = (P.depth[i] * 14) + "px";
  const tog = el("span", "tog", P.kids[i] ? "\u25b8" : "");
  name.appendChild(tog);
  const label = el("span", "label", shortName(i));
  name.appendChild(label);
  const m0 = marks.get(i) || [];
  if (m0.includes("detection")) name.appendChild(el("span", "badge det", "detection"));
  if (m0.includes("producer")) name.appendChild(el("span", "badge", "producer"));
  if (P.t.nodes[i][3] && P.t.nodes[i][3].checkpoint !== undefined) { r.classList.add("checkpoint"); r.dataset.checkpoint = P.t.nodes[i][3].checkpoint; }
  if (P.subBad[i] && !(isBad(P.nan[i]) || isBad(P.pinf[i]) || isBad(P.ninf[i]))) name.appendChild(el("span", "sub-bad", "\u25cf NaN/Inf inside"));
  name.title = P.t.nodes[i][1];
  r.appendChild(name);
  for (const c of [P.nan[i], P.pinf[i], P.ninf[i]]) r.appendChild(el("span", "num" + (isBad(c) ? " bad" : c === -2 ? " none" : ""), countText(c)));
  r.appendChild(el("span", "num", fmtNum(P.amax[i])));
  for (let f = 0; f < FORMATS.length; f++) r.appendChild(headroomBar(P.amax[i], f));
  const m = marks.get(i);
  if (m) for (const c of m) r.classList.add(c);
  tog.addEventListener("click", (ev) => { ev.stopPropagation(); toggle(i); });
  r.addEventListener("click", () => select(i));
  rowOf.set(i, r);
  return r;
}
function renderChildren(i, box, from) {
  const ks = P.kids[i] || [];
  const end = Math.min(ks.length, from + PAGE);
  const frag = document.createDocumentFragment();
  for (let k = from; k < end; k++) frag.appendChild(makeNode(ks[k]));
  if (end < ks.length) {
    const more = el("button", "more", "show " + Math.min(PAGE, ks.length - end) + " more of " + (ks.length - end) + " remaining");
    more.type = "button";
    more.addEventListener("click", () => { more.remove(); renderChildren(i, box, end); });
    frag.appendChild(more);
  }
  box.appendChild(frag);
}
function makeNode(i) {
  const wrap = el("div");
  wrap.appendChild(makeRow(i));
  if (P.kids[i] && P.open[i]) openBox(i, wrap);
  return wrap;
}
function openBox(i, wrap) {
  const box = el("div");
  childBox.set(i, box);
  wrap.appendChild(box);
  renderChildren(i, box, 0);
  rowOf.get(i).querySelector(".tog").textContent = "\u25be";
}
function toggle(i) {
  if (!P.kids[i]) return;
  const r = rowOf.get(i);
  if (P.open[i]) {
    P.open[i] = 0;
    const box = childBox.get(i);
    if (box) { dropRows(i); box.remove(); childBox.delete(i); }
    r.querySelector(".tog").textContent = "\u25b8";
  } else {
    P.open[i] = 1;
    openBox(i, r.parentNode);
  }
}
function dropRows(i) { // forget the rows below i (their DOM goes with the box)
  const st = [...(P.kids[i] || [])];
  while (st.length) { const k = st.pop(); if (rowOf.delete(k) && P.kids[k]) { childBox.delete(k); st.push(...P.kids[k]); } }
}
function drawTree() {
  const box = $("tree");
  box.textContent = "";
  rowOf = new Map(); childBox = new Map(); selRow = null;
  box.appendChild(makeNode(0));
}
function reveal(i) {
  // open every ancestor, then make sure the row exists (a "show more" page may hide it)
  const chain = [];
  for (let p = P.t.nodes[i][0]; p >= 0; p = P.t.nodes[p][0]) chain.push(p);
  for (let k = chain.length - 1; k >= 0; k--) if (!P.open[chain[k]]) toggle(chain[k]);
  if (!rowOf.has(i)) {
    const p = P.t.nodes[i][0];
    const wrap = el("div");
    wrap.appendChild(makeRow(i));
    childBox.get(p).appendChild(wrap);
  }
  const r = rowOf.get(i);
  select(i);
  r.scrollIntoView({ block: "center" });
  return r;
}
function select(i) {
  if (selRow) selRow.classList.remove("sel");
  selRow = rowOf.get(i) || null;
  if (selRow) selRow.classList.add("sel");
  const n = P.t.nodes[i];
  $("details").hidden = false;
  $("details-name").textContent = n[1] + (n[3] && n[3].checkpoint !== undefined ? " checkpoint \u201c" + n[3].checkpoint + "\u201d" : "");
  const body = $("details-body");
  body.textContent = "";
  if (!n[2].length) { body.appendChild(el("div", "stats", "no tensors recorded")); return; }
  const tab = el("table");
  const hr = el("tr");
  for (const h of ["tensor", "dtype", "shape", "NaN", "+Inf", "\u2212Inf", "|x| max", ...FORMATS.map((f) => f[0] + " headroom")]) hr.appendChild(el("th", null, h));
  tab.appendChild(hr);
  for (const x of n[2]) {
    const tr = el("tr");
    tr.appendChild(el("td", null, x[0]));
    tr.appendChild(el("td", null, x[1]));
    tr.appendChild(el("td", null, x[2]));
    for (const c of [x[4], x[5], x[6]]) tr.appendChild(el("td", "n" + (isBad(c) ? " bad" : ""), countText(c)));
    const m = num(x[7]);
    tr.appendChild(el("td", "n", fmtNum(m)));
    for (const f of FORMATS) tr.appendChild(el("td", "n", Number.isNaN(m) || m === 0 ? "" : Number.isFinite(m) ? Math.log2(f[1] / m).toFixed(2) + " b" : "overflow"));
    tab.appendChild(tr);
    if (x[8] && x[8].length) {  // its bad segments (recorded with a segmentation)
      const sr = el("tr", "segments");
      const td = el("td", null, x[8].join("\n"));
      td.colSpan = 7 + FORMATS.length;
      td.style.whiteSpace = "pre-line";
      sr.appendChild(td);
      tab.appendChild(sr);
    }
  }
  body.appendChild(tab);
}
function showTree(ti) {
  cur = ti;
  P = prepare(ti);
  marks = new Map();
  const addMark = (i, c) => { if (i >= 0) (marks.get(i) || marks.set(i, []).get(i)).push(c); };
  if (!P.open) {
    P.open = new Uint8Array(P.N);
    const all = P.N <= EXPAND_ALL_MAX;
    for (let i = 0; i < P.N; i++) if (all || P.depth[i] < 1) P.open[i] = 1;
  }
  if (P.t.first) addMark(P.t.first[0], "first");
  if (P.t.producer >= 0) addMark(P.t.producer, "producer");
  if (P.t.detection >= 0) addMark(P.t.detection, "detection");
  if (D.diff && D.diff.tree === ti) {
    for (const d of D.diff.diverged) addMark(d, "diff-diverged");
    addMark(D.diff.first_node, "diff-first");
    addMark(D.diff.producer_node, "diff-producer");
  }
  $("tree-select").value = String(ti);
  drawTree();
  let bad = 0;
  for (let i = 0; i < P.N; i++) if (isBad(P.nan[i]) || isBad(P.pinf[i]) || isBad(P.ninf[i])) bad++;
  $("tree-stats").textContent = P.N + " modules, " + bad + " with NaN/Inf" + (P.t.step >= 0 ? ", step " + P.t.step : "") + (P.t.rank >= 0 ? ", rank " + P.t.rank : "");
  runSearch();
}

// ------------------------------------------------------------------ search and filter
let searchTimer = 0;
function runSearch() {
  const q = $("search").value.trim().toLowerCase();
  const onlyBad = $("only-bad").checked;
  const out = $("search-results");
  out.textContent = "";
  if (!q && !onlyBad) return;
  let found = 0;
  const frag = document.createDocumentFragment();
  for (let i = 0; i < P.N; i++) {
    if (q && P.lower[i].indexOf(q) < 0) continue;
    if (onlyBad && !(isBad(P.nan[i]) || isBad(P.pinf[i]) || isBad(P.ninf[i]))) continue;
    if (++found <= 200) {
      const d = el("div", null, P.t.nodes[i][1]);
      d.dataset.node = i;
      d.addEventListener("click", () => reveal(i));
      frag.appendChild(d);
    }
  }
  out.appendChild(el("div", "stats", found + " match" + (found === 1 ? "" : "es") + (found > 200 ? " (first 200 shown)" : "")));
  out.appendChild(frag);
  out.dataset.matches = found;
}
$("search").addEventListener("input", () => { clearTimeout(searchTimer); searchTimer = setTimeout(runSearch, 120); });
$("only-bad").addEventListener("change", runSearch);
$("expand-all").addEventListener("click", () => {
  if (P.N > 20000 && !confirm(P.N + " modules: expanding everything may be slow. Go on?")) return;
  P.open.fill(1); drawTree();
});
$("collapse-all").addEventListener("click", () => { P.open.fill(0); P.open[0] = 1; drawTree(); });
$("tree-select").addEventListener("change", (e) => showTree(Number(e.target.value)));

// ------------------------------------------------------------------ summary
function jump(ti, node) { if (cur !== ti) showTree(ti); reveal(node); }
function drawSummary() {
  const b = $("summary-body");
  const v = el("div", "verdict " + (D.first ? "bad" : "ok"));
  if (D.first) {
    const a = el("a", "jump", D.first.text);
    a.id = "first-nan";
    a.dataset.path = D.trees[D.first.tree].nodes[D.first.node][1];
    if (D.first.producer >= 0) a.dataset.producerPath = D.trees[D.first.tree].nodes[D.first.producer][1];
    a.addEventListener("click", () => jump(D.first.tree, D.first.node));
    v.appendChild(a);
  } else {
    v.textContent = "no NaN or Inf in any input";
    v.id = "no-nan";
  }
  b.appendChild(v);
  if (D.first && D.first.segments && D.first.segments.length) {  // recorded with a segmentation: its bad segments
    const ul = el("ul", "segments");
    ul.id = "first-segments";
    for (const line of D.first.segments) ul.appendChild(el("li", null, line));
    b.appendChild(ul);
  }
  if (D.first && D.first.producer >= 0) {
    const p = el("div", "producer-line");
    p.appendChild(el("b", null, "producer: "));
    const a = el("a", "jump", D.trees[D.first.tree].nodes[D.first.producer][1]);
    a.id = "producer";
    a.addEventListener("click", () => jump(D.first.tree, D.first.producer));
    p.appendChild(a);
    b.appendChild(p);
  }
  for (const d of D.detections) {
    const p = el("div", "detection");
    p.appendChild(el("b", null, "recorder's detection (" + D.trees[d.tree].source + "): "));
    const a = el(d.node >= 0 ? "a" : "span", d.node >= 0 ? "jump" : null, d.text);
    a.className = (a.className ? a.className + " " : "") + "detection-text";
    if (d.node >= 0) { a.dataset.path = D.trees[d.tree].nodes[d.node][1]; a.addEventListener("click", () => jump(d.tree, d.node)); }
    p.appendChild(a);
    b.appendChild(p);
  }
  let nodes = 0, tensors = 0, badT = 0;
  for (const t of D.trees) for (const n of t.nodes) { nodes++; for (const x of n[2]) { tensors++; if (isBad(x[4]) || isBad(x[5]) || isBad(x[6])) badT++; } }
  const s = el("div", "stats", D.trees.length + " tree" + (D.trees.length === 1 ? "" : "s") + ", " + nodes + " modules, " + tensors + " tensors, " + badT + " with NaN/Inf" + (D.histories ? ", " + D.histories + " history file" + (D.histories === 1 ? "" : "s") : ""));
  s.id = "totals";
  s.dataset.nonfiniteTensors = badT;
  s.dataset.tensors = tensors;
  b.appendChild(s);
  const notes = [];
  for (const t of D.trees) for (const n of t.notes) notes.push(t.source + ": " + n);
  if (notes.length) {
    const ul = el("ul", "notes");
    for (const n of notes.slice(0, 50)) ul.appendChild(el("li", null, n));
    if (notes.length > 50) ul.appendChild(el("li", null, "... and " + (notes.length - 50) + " more"));
    b.appendChild(ul);
  }
  const sel = $("tree-select");
  D.trees.forEach((t, i) => {
    const o = el("option", null, t.source + (t.step >= 0 ? " (step " + t.step + ")" : "") + (t.kind === "scan" ? " [scan]" : t.kind === "snapshot" ? " [snapshot]" : ""));
    o.value = String(i);
    sel.appendChild(o);
  });
}
function drawDiff() {
  const d = D.diff;
  if (!d) return;
  $("diff").hidden = false;
  const b = $("diff-body");
  const v = el("div", "verdict", d.verdict);
  v.id = "diff-verdict";
  b.appendChild(v);
  b.appendChild(el("div", "stats", "A (reference): " + d.a + "   B (candidate): " + d.b));
  const line = (label, text, id, node) => {
    const p = el("div");
    p.appendChild(el("b", null, label + ": "));
    const a = el(node >= 0 ? "a" : "span", node >= 0 ? "jump" : null, text);
    a.id = id;
    if (node >= 0) { a.dataset.node = node; a.addEventListener("click", () => jump(d.tree, node)); }
    p.appendChild(a);
    b.appendChild(p);
  };
  if (d.first_text) line("first divergence", d.first_text, "diff-first", d.first_node);
  if (d.producer_text) line("likely producer", d.producer_text, "diff-producer", d.producer_node);
  if (d.structural.length) {
    const tab = el("table");
    const hr = el("tr");
    for (const h of ["structural difference", "module", "tensor", "A", "B"]) hr.appendChild(el("th", null, h));
    tab.appendChild(hr);
    for (const s of d.structural.slice(0, 100)) { const tr = el("tr"); for (const c of s) tr.appendChild(el("td", null, c)); tab.appendChild(tr); }
    b.appendChild(tab);
  }
  if (d.segment_summary) {  // the bad segments of A against B, as nanscope-diff prints them
    const h = el("div", "stats", "bad segments, A vs B (" + d.segment_summary + "):");
    h.id = "diff-segments-summary";
    b.appendChild(h);
    const ul = el("ul", "segments");
    ul.id = "diff-segments";
    for (const line of d.segments) ul.appendChild(el("li", null, line));
    b.appendChild(ul);
  }
  for (const n of d.notes) b.appendChild(el("div", "notes", n));
}

// ------------------------------------------------------------------ heatmaps (inline SVG)
const HEAT_ROWS = 400;
function color(v, lo, hi) {
  const t = Math.max(0, Math.min(1, (v - lo) / (hi - lo || 1)));
  return "hsl(" + (230 - 180 * t).toFixed(0) + ",70%," + (88 - 40 * t).toFixed(0) + "%)";
}
function drawHeatmap(h, box) {
  const sec = el("div");
  sec.appendChild(el("h3", null, h.title));
  const filt = el("input");
  filt.type = "search"; filt.placeholder = "filter sites"; filt.className = "heat-filter";
  sec.appendChild(filt);
  const holder = el("div");
  sec.appendChild(holder);
  box.appendChild(sec);
  let lo = Infinity, hi = -Infinity;
  for (const r of h.rows) for (const x of r[1]) if (x !== null) { lo = Math.min(lo, x); hi = Math.max(hi, x); }
  if (lo === Infinity) { lo = 0; hi = 17; }
  lo = Math.floor(Math.min(lo, 0)); hi = Math.ceil(Math.max(hi, 17));
  const draw = () => {
    holder.textContent = "";
    const q = filt.value.trim().toLowerCase();
    let rows = h.rows.filter((r) => !q || String(r[0]).toLowerCase().includes(q));
    const total = rows.length;
    if (rows.length > HEAT_ROWS) {
      // keep the rows that matter: NaN/Inf first, then the largest values
      const score = (r) => (r[2].some((x) => x) ? Infinity : Math.max(-Infinity, ...r[1].filter((x) => x !== null)));
      rows = rows.map((r, i) => [r, i, score(r)]).sort((a, b) => b[2] - a[2] || a[1] - b[1]).slice(0, HEAT_ROWS).sort((a, b) => a[1] - b[1]).map((x) => x[0]);
    }
    const cw = Math.max(14, Math.min(40, Math.floor(900 / Math.max(1, h.cols.length)))), ch = 14, left = 300, top = 96;
    const W = Math.max(left + cw * h.cols.length + 20, left + 360 + 260), H = top + ch * rows.length + 10;
    const svg = sv("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H, class: "heatmap" });
    // legend: the scale with the formats' limits marked
    const LW = 360, lx = left, ly = 6;
    for (let k = 0; k < 60; k++) svg.appendChild(sv("rect", { x: lx + (k * LW) / 60, y: ly, width: LW / 60 + 0.5, height: 10, fill: color(lo + ((hi - lo) * k) / 59, lo, hi) }));
    const lt = (txt, x, y, anchor) => { const t = sv("text", { x, y, "text-anchor": anchor || "start" }); t.textContent = txt; svg.appendChild(t); };
    lt("limits (largest finite):", lx - 8, ly + 36, "end");
    lt(String(lo), lx - 4, ly + 22, "end"); lt(String(hi), lx + LW + 4, ly + 22, "start");
    let li = 0, on = 0;
    for (const f of FORMATS) {
      const l = Math.log2(f[1]);
      if (l < lo || l > hi) { lt(f[0] + " limit " + l.toFixed(1) + " (off scale)", lx + LW + 40, ly + 10 + 12 * li++); continue; }
      const x = lx + ((l - lo) / (hi - lo)) * LW;
      svg.appendChild(sv("line", { x1: x, x2: x, y1: ly - 2, y2: ly + 12, stroke: "#b71c1c", "stroke-width": 1.5 }));
      svg.appendChild(sv("line", { x1: x, x2: x, y1: ly + 12, y2: ly + 26 + 12 * (on % 3), stroke: "#b71c1c", "stroke-width": 0.5 }));
      lt(f[0] + " " + l.toFixed(1), x, ly + 36 + 12 * (on++ % 3), "middle");
    }
    lt("log2 |x| max", lx - 8, ly + 9, "end");
    // column labels
    h.cols.forEach((c, j) => { const t = sv("text", { x: left + j * cw + cw / 2, y: top - 6, "text-anchor": "middle" }); t.textContent = String(c); svg.appendChild(t); });
    const f16 = Math.log2(FORMATS[0][1]);
    rows.forEach((r, i) => {
      const y = top + i * ch;
      const t = sv("text", { x: left - 6, y: y + ch - 3, "text-anchor": "end" });
      const s = String(r[0]);
      t.textContent = s.length > 42 ? "\u2026" + s.slice(-41) : s;
      const tt = sv("title", {}); tt.textContent = s; t.appendChild(tt);
      svg.appendChild(t);
      r[1].forEach((v, j) => {
        const x = left + j * cw;
        const bad = r[2][j];
        let fill = v === null ? "#f4f4f4" : color(v, lo, hi);
        if (bad) fill = "#000";
        const rect = sv("rect", { x, y, width: cw - 1, height: ch - 1, fill });
        if (!bad && v !== null && v > f16) { rect.setAttribute("stroke", "#d50000"); rect.setAttribute("stroke-width", "2"); }
        const tip = sv("title", {});
        tip.textContent = s + " @ " + h.cols[j] + ": " + (bad ? "NaN/Inf" : v === null ? "no data" : "log2 |x|max = " + v.toFixed(2));
        rect.appendChild(tip);
        svg.appendChild(rect);
        if (bad) { const xt = sv("text", { x: x + cw / 2, y: y + ch - 3, "text-anchor": "middle", fill: "#fff" }); xt.textContent = "\u00d7"; svg.appendChild(xt); }
      });
    });
    holder.appendChild(el("div", "stats", rows.length + " of " + total + " sites shown" + (total > rows.length ? " (NaN/Inf and largest first; filter to see others)" : "") + "; black \u00d7: NaN/Inf; red outline: above the fp16 limit"));
    holder.appendChild(svg);
  };
  filt.addEventListener("input", draw);
  draw();
}
function drawHeatmaps() {
  if (!D.heatmaps.length) return;
  $("heatmaps").hidden = false;
  const box = $("heatmaps-body");
  const scroll = el("div"); scroll.id = "heatmap-box";
  box.appendChild(scroll);
  for (const h of D.heatmaps) drawHeatmap(h, scroll);
}

// ------------------------------------------------------------------ start
drawSummary();
drawDiff();
if (D.trees.length) {
  showTree(D.first ? D.first.tree : D.diff ? D.diff.tree : 0);
  if (D.first && D.first.tree === cur) reveal(D.first.node);
  else if (D.diff && D.diff.producer_node >= 0) reveal(D.diff.producer_node);
} else {
  $("tree-section").hidden = true; // history files only
}
window.scrollTo(0, 0);
drawHeatmaps();
const ms = performance.now() - T0;
// report.html#search=TEXT opens with that search run (a link to a search; also how the tests time one)
if (D.trees.length && location.hash.startsWith("#search=")) {
  $("search").value = decodeURIComponent(location.hash.slice(8));
  const s0 = performance.now();
  runSearch();
  document.body.dataset.searchMs = (performance.now() - s0).toFixed(1);
}
$("footer").textContent = "written by " + D.version + "; rendered in " + ms.toFixed(0) + " ms (" + D.trees.reduce((a, t) => a + t.nodes.length, 0) + " modules)";
document.body.dataset.loadMs = ms.toFixed(1);
document.body.dataset.ready = "1";
})();
</script>
</body>
</html>
)NSHTML";

// ---------------------------------------------------------------------------------------------------------
// Block-scaled statistics ("nanscope_block_scaled"; docs/report.md, "Blocks with loss"): the columns "blocks with
// loss" and "scale exponents", a layer's per-format table and worst block, the warned tensors in the summary, and
// A against B in the diff. These parts go into the page only when a tree carries the key (with_block_parts): the
// page of trees without it is byte for byte the page above. Each is inserted at an anchor of page_head or
// page_tail that must occur there exactly once (else the report fails with a message: a test catches it).
// ---------------------------------------------------------------------------------------------------------

inline constexpr const char* block_css = R"NSHTML(#tree-section.blocks .thead, #tree-section.blocks .row { grid-template-columns: minmax(260px, 1fr) 56px 56px 56px 84px repeat(4, 92px) 180px 190px; }
.blk-h { display: none; }
#tree-section.blocks .blk-h { display: block; }
.blk { font-size: 11px; font-variant-numeric: tabular-nums; white-space: nowrap; overflow: hidden; line-height: 14px; }
.blk .lossy { color: #8d4b00; }
.blk .warned { color: var(--bad); font-weight: 700; }
.row.blk-warned .blk-loss { background: #fff3e0; }
.badge.blk { background: var(--warn); }
.sub-blk { color: var(--warn); font-size: 10px; margin-left: 4px; }
svg.spark { vertical-align: middle; margin-left: 4px; }
svg.spark rect { fill: #546e7a; }
#details h3 { font-size: 13px; margin: 10px 0 4px 0; }
#details td.worst { color: #4e342e; padding-left: 24px; }
#diff .delta.worse { color: var(--bad); font-weight: 600; }
#diff .delta.better { color: var(--ok); font-weight: 600; }
#diff-blocks tr.changed td { background: #fffde7; }
#blocks-warned { margin: 2px 0 0 0; padding-left: 18px; }
)NSHTML";

inline constexpr const char* block_thead =
    R"NSHTML(<span class="blk-h" title="per format: the percentage of blocks that would lose a value (clipped or flushed to 0, or a NaN scale), (lossy blocks / blocks)">blocks with loss</span><span class="blk-h" title="per format: the block scale exponents, min..max, mean &plusmn; std, and their histogram">scale exponents</span>)NSHTML";

inline constexpr const char* block_script = R"NSHTML(// ------------------------------------------------------------------ block-scaled targets (nanscope_block_scaled)
// a tensor's 10th item: {rule, axis, warn, formats: [{format, block_size, blocks, lossy_blocks, lossy_fraction, ...}]}
const blkPct = (f) => { const x = num(f); return Number.isNaN(x) ? "?" : (100 * x).toFixed(1) + "%"; };
// the warning threshold of a format: its own (the tree's warn_threshold), else the target's
const blkThr = (b, f) => (Number.isNaN(num(f.warn_threshold)) ? b.warn : f.warn_threshold);
const blkLine = (f) => f.format + " " + blkPct(f.lossy_fraction) + " (" + f.lossy_blocks + "/" + f.blocks + ")";
const blkFix2 = (v) => { const x = num(v); return Number.isNaN(x) ? "?" : x.toFixed(2); };
const blkSpread = (f) => (f.scale_exp ? f.scale_exp.min + ".." + f.scale_exp.max + ", " + blkFix2(f.scale_exp.mean) + " \u00b1 " + blkFix2(f.scale_exp.std) : "no scale");
const blkDelta = (fa, fb) => { const d = 100 * (num(fb.lossy_fraction) - num(fa.lossy_fraction)); return Number.isNaN(d) ? "?" : (d > 0 ? "+" : "") + d.toFixed(1) + " pp"; };
function blkSpark(f, w, h) { // the histogram of the scale exponents, min..max, as bars
  const s = f.scale_exp, lo = s.min, n = Math.max(1, s.max - s.min + 1);
  let top = 1;
  for (const b of s.histogram) top = Math.max(top, b[1]);
  const svg = sv("svg", { width: w, height: h, viewBox: "0 0 " + w + " " + h, class: "spark" });
  svg.appendChild(sv("rect", { x: 0, y: h - 1, width: w, height: 1, style: "fill:#cfd8dc" }));
  for (const b of s.histogram) {
    const bh = Math.max(1, Math.round((b[1] / top) * (h - 1)));
    svg.appendChild(sv("rect", { x: ((b[0] - lo) * w) / n, y: h - bh, width: Math.max(1, w / n - (n > 1 ? 0.5 : 0)), height: bh }));
  }
  const tip = sv("title", {});
  tip.textContent = f.format + " scale exponents (blocks): " + s.histogram.map((b) => "2^" + b[0] + ": " + b[1]).join(", ");
  svg.appendChild(tip);
  return svg;
}
function blkPrepare() { // per row: the formats of its tensors with block statistics (its outputs' when it has some)
  $("tree-section").classList.toggle("blocks", !!P.t.blocks);
  if (!P.t.blocks || P.blk) return;
  P.blk = new Array(P.N); P.blkSub = new Uint8Array(P.N);
  for (let i = 0; i < P.N; i++) {
    const ts = P.t.nodes[i][2].filter((x) => x[9]);
    if (!ts.length) continue;
    const outs = ts.filter((x) => x[3] === 0), use = outs.length ? outs : ts;
    const by = new Map(); // format -> the tensor that loses the largest fraction of blocks in it
    for (const x of use) for (const f of x[9].formats) { const o = by.get(f.format); if (!o || num(f.lossy_fraction) > num(o.f.lossy_fraction)) by.set(f.format, { f, label: x[0] }); }
    const tip = [];
    for (const x of ts) for (const f of x[9].formats) tip.push(x[0] + ": " + blkLine(f) + (f.warned ? ", warned (above " + blkPct(blkThr(x[9], f)) + ")" : "") + "; scale exponents " + blkSpread(f));
    P.blk[i] = { rows: [...by.values()], warned: ts.some((x) => x[9].formats.some((f) => f.warned)), tip: tip.join("\n") };
  }
  for (let i = P.N - 1; i > 0; i--) { const p = P.t.nodes[i][0]; if (p >= 0 && (P.blkSub[i] || (P.blk[i] && P.blk[i].warned))) P.blkSub[p] = 1; }
}
function blkRow(r, name, i) {
  if (!P.t.blocks) return;
  const B = P.blk[i], c1 = el("span", "blk blk-loss"), c2 = el("span", "blk blk-exp");
  if (B) {
    for (const x of B.rows) {
      c1.appendChild(el("div", "blk-line" + (x.f.warned ? " warned" : x.f.lossy_blocks > 0 ? " lossy" : ""), blkLine(x.f)));
      const d = el("div", "blk-spread");
      d.appendChild(el("span", "blk-exp-text", blkSpread(x.f)));
      if (x.f.scale_exp && x.f.scale_exp.histogram.length) d.appendChild(blkSpark(x.f, 44, 11));
      c2.appendChild(d);
    }
    c1.title = B.tip; c2.title = B.tip;
    if (B.warned) { r.classList.add("blk-warned"); name.appendChild(el("span", "badge blk", "lossy blocks")); }
  }
  if (P.blkSub[i] && !(B && B.warned)) name.appendChild(el("span", "sub-blk", "\u25cf lossy blocks inside"));
  r.appendChild(c1);
  r.appendChild(c2);
}
function blkDetails(body, n) { // a layer's tensors: every format, its spread, and its worst block
  const ts = n[2].filter((x) => x[9]);
  if (!ts.length) return;
  body.appendChild(el("h3", null, "block-scaled targets: what quantizing would lose"));
  const tab = el("table", "blk-table");
  tab.id = "blk-details";
  const hr = el("tr");
  for (const h of ["tensor", "format", "block", "blocks", "with loss", "clipped", "flushed", "subnormal", "zero / NaN / zero-scale blocks", "scale exponents", "", "tensor scale", "warned"]) hr.appendChild(el("th", null, h));
  tab.appendChild(hr);
  for (const x of ts) {
    const b = x[9];
    for (const f of b.formats) {
      const tr = el("tr", "blk-format" + (f.warned ? " warned" : ""));
      const cells = [x[0], f.format, f.block_size, f.blocks, blkPct(f.lossy_fraction) + " (" + f.lossy_blocks + ")", f.clipped, f.flushed, f.subnormal, f.zero_blocks + " / " + f.nan_blocks + " / " + f.zero_scale_blocks, blkSpread(f)];
      cells.forEach((c, k) => tr.appendChild(el("td", k >= 2 && k <= 7 ? "n" : null, c)));
      const sp = el("td");
      if (f.scale_exp && f.scale_exp.histogram.length) sp.appendChild(blkSpark(f, 90, 14));
      tr.appendChild(sp);
      tr.appendChild(el("td", "n", f.tensor_scale === undefined ? "" : fmtNum(num(f.tensor_scale))));
      tr.appendChild(el("td", null, (f.warned ? "yes" : "no") + " (threshold " + blkPct(blkThr(b, f)) + ")"));
      tr.title = x[0] + ": " + (b.rule ? b.rule + " scales, " : "") + "blocks along axis " + b.axis;
      tab.appendChild(tr);
      if (f.worst) {
        const w = f.worst, wr = el("tr", "blk-worst");
        const td = el("td", "worst", "worst block " + w.index + " (first element " + w.first_element + ", " + w.elements + " elements): |x| max " + fmtNum(num(w.abs_max)) + ", scale " + w.scale + " (byte " + w.scale_byte + "): " + w.clipped + " clipped, " + w.flushed + " flushed, error max " + fmtNum(num(w.error_max_abs)) + ", rms " + fmtNum(num(w.error_rms)));
        td.colSpan = 13;
        wr.appendChild(td);
        tab.appendChild(wr);
      }
    }
  }
  body.appendChild(tab);
}
function blkSummary(b) { // the tensors whose blocks warned, in every tree, each a link to its row
  let checked = 0;
  const warned = [];
  D.trees.forEach((t, ti) => {
    if (!t.blocks) return;
    t.nodes.forEach((n, i) => {
      for (const x of n[2]) {
        if (!x[9]) continue;
        checked++;
        const fs = x[9].formats.filter((f) => f.warned);
        if (fs.length) warned.push([ti, i, (n[3] && n[3].checkpoint !== undefined ? n[1] + " checkpoint \u201c" + n[3].checkpoint + "\u201d" : n[1]) + " " + x[0] + ": " + fs.map((f) => blkLine(f) + (Number.isNaN(num(x[9].warn)) ? " (above " + blkPct(blkThr(x[9], f)) + ")" : "")).join(", ") + (Number.isNaN(num(x[9].warn)) ? "" : " (above " + blkPct(x[9].warn) + ")") + (D.trees.length > 1 ? " (" + t.source + ")" : "")]);
      }
    });
  });
  if (!checked) return;
  const s = el("div", "stats", "block-scaled targets: " + checked + " tensor" + (checked === 1 ? "" : "s") + " checked, " + warned.length + " with more blocks losing values than their threshold");
  s.id = "blocks-summary";
  b.appendChild(s);
  if (!warned.length) return;
  const ul = el("ul", "notes");
  ul.id = "blocks-warned";
  for (const w of warned.slice(0, 50)) {
    const li = el("li");
    const a = el("a", "jump", w[2]);
    a.dataset.path = D.trees[w[0]].nodes[w[1]][1];
    a.addEventListener("click", () => jump(w[0], w[1]));
    li.appendChild(a);
    ul.appendChild(li);
  }
  if (warned.length > 50) ul.appendChild(el("li", null, "... and " + (warned.length - 50) + " more"));
  b.appendChild(ul);
}
function blkDiff(b, d) { // A against B, per tensor and format
  if (!d.blocks) return;
  const A = D.trees[d.blocks.a], B = D.trees[d.tree], rows = [];
  for (const [mod, label, ra, ka, rb, kb] of d.blocks.rows) {
    const fa = ka >= 0 && A.nodes[ra][2][ka][9] ? A.nodes[ra][2][ka][9].formats : [];
    const fb = kb >= 0 && B.nodes[rb][2][kb][9] ? B.nodes[rb][2][kb][9].formats : [];
    const names = fa.map((f) => f.format);
    for (const f of fb) if (!names.includes(f.format)) names.push(f.format);
    for (const nm of names) rows.push([mod, label, nm, fa.find((f) => f.format === nm) || null, fb.find((f) => f.format === nm) || null, rb]);
  }
  let changed = 0, big = null, bigD = -1;
  for (const r of rows) {
    if (!r[3] || !r[4]) continue;
    const dd = Math.abs(num(r[4].lossy_fraction) - num(r[3].lossy_fraction));
    if (r[3].lossy_fraction !== r[4].lossy_fraction) { changed++; if (dd > bigD) { bigD = dd; big = r; } }
  }
  const s = el("div", "stats", "block-scaled targets, A vs B: " + rows.length + " tensor format" + (rows.length === 1 ? "" : "s") + ", " + changed + " with another fraction of blocks with loss" + (big ? "; the largest change: " + big[0] + " " + big[1] + " " + big[2] + " " + blkDelta(big[3], big[4]) : "") + " (not counted in the verdict)");
  s.id = "diff-blocks-summary";
  b.appendChild(s);
  const tab = el("table");
  tab.id = "diff-blocks";
  const hr = el("tr");
  for (const h of ["module", "tensor", "format", "A: blocks with loss", "B: blocks with loss", "B \u2212 A", "A: scale exponents", "B: scale exponents"]) hr.appendChild(el("th", null, h));
  tab.appendChild(hr);
  const side = (f) => (f ? blkLine(f).slice(f.format.length + 1) + (f.warned ? " warned" : "") : "not checked");
  for (const r of rows.slice(0, 1000)) {
    const tr = el("tr", r[3] && r[4] && r[3].lossy_fraction !== r[4].lossy_fraction ? "changed" : null);
    const a = el("a", "jump", r[0]);
    a.addEventListener("click", () => jump(d.tree, r[5]));
    const td = el("td"); td.appendChild(a); tr.appendChild(td);
    tr.appendChild(el("td", null, r[1]));
    tr.appendChild(el("td", null, r[2]));
    tr.appendChild(el("td", "n", side(r[3])));
    tr.appendChild(el("td", "n", side(r[4])));
    const dd = r[3] && r[4] ? num(r[4].lossy_fraction) - num(r[3].lossy_fraction) : NaN;
    tr.appendChild(el("td", "n delta" + (dd > 0 ? " worse" : dd < 0 ? " better" : ""), r[3] && r[4] ? blkDelta(r[3], r[4]) : ""));
    tr.appendChild(el("td", null, r[3] ? blkSpread(r[3]) : ""));
    tr.appendChild(el("td", null, r[4] ? blkSpread(r[4]) : ""));
    tab.appendChild(tr);
  }
  b.appendChild(tab);
  if (rows.length > 1000) b.appendChild(el("div", "stats", "... and " + (rows.length - 1000) + " more tensor formats"));
}
function blkStart() { // nothing selected (no NaN/Inf, no diff producer): open the first row whose blocks warned
  if (!P || !P.blk || selRow) return;
  for (let i = 0; i < P.N; i++) if (P.blk[i] && P.blk[i].warned) { reveal(i); return; }
}
)NSHTML";

/// One insertion of a block-scaled part: `text` goes before (or after) `anchor`.
struct page_insert {
  const char* anchor;
  const char* text;
  bool after;
};

/// `page` with each insertion made at its anchor, which must occur exactly once.
inline std::string with_inserts(std::string page, const page_insert* ins, std::size_t n) {
  for (std::size_t k = 0; k < n; ++k) {
    const std::string anchor = ins[k].anchor;
    const std::size_t at = page.find(anchor);
    if (at == std::string::npos || page.find(anchor, at + 1) != std::string::npos)
      throw std::logic_error("the page's place for its block-scaled part is not in its text exactly once: " + anchor);
    page.insert(ins[k].after ? at + anchor.size() : at, ins[k].text);
  }
  return page;
}

/// page_head with the block-scaled parts (its style, the columns' heads).
inline std::string block_page_head() {
  const page_insert ins[] = {
      {"</style>\n</head>", block_css, false},
      {"<span>fp8 e5m2</span>", block_thead, true},  // the last head of the table's header row
  };
  return with_inserts(page_head, ins, sizeof ins / sizeof ins[0]);
}

/// page_tail with the block-scaled parts (the script's functions and their calls).
inline std::string block_page_tail() {
  const page_insert ins[] = {
      {"  for (let f = 0; f < FORMATS.length; f++) r.appendChild(headroomBar(P.amax[i], f));\n", "  blkRow(r, name, i);\n", true},
      {"  body.appendChild(tab);\n", "  blkDetails(body, n);\n", true},
      {"  P = prepare(ti);\n", "  blkPrepare();\n", true},
      {"  const notes = [];\n  for (const t of D.trees) for (const n of t.notes)", "  blkSummary(b);\n", false},
      {"  for (const n of d.notes) b.appendChild(el(\"div\", \"notes\", n));\n}\n", "  blkDiff(b, d);\n", false},
      {"window.scrollTo(0, 0);\ndrawHeatmaps();\n", "blkStart();\n", false},
      {"function makeRow(i) {\n", block_script, false},  // last: the anchors above are not looked for in it
  };
  return with_inserts(page_tail, ins, sizeof ins / sizeof ins[0]);
}

}  // namespace nanscope_report

#endif  // NANSCOPE_CLI_REPORT_PAGE_HPP
