// The dashboard's helpers (`app.js` has the views): building elements,
// calling the admin API, tables, tiles and charts. Loaded first, as a
// classic script: what it declares is shared with the others.
"use strict";

// ---- small helpers -------------------------------------------------------

/** An element with attributes (on* are listeners) and children (text is
 *  set as text, never as HTML: job bodies and names are shown as given). */
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    // Through the CSSOM: the page's policy refuses inline style attributes.
    else if (k === "style") Object.assign(el.style, v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const enc = encodeURIComponent;
const fmt = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));
const rate = (r) => (r === null || r === undefined ? "–" : `${r < 10 ? r.toFixed(1) : Math.round(r)}/s`);
const when = (ms) => (ms ? new Date(ms).toLocaleString() : "–");

// The admin API's root as this page was reached: the dashboard is served
// at `<root>dashboard/`, so its calls are relative to where it sits and it
// works behind a proxy that adds a path prefix (`/sundial/dashboard/`).
const ROOT = new URL("../", document.baseURI).pathname;

/** A JSON call to the admin API (`path` from its root, e.g. `pools`);
 *  throws with the API's own message. */
async function api(path, options = {}) {
  const resp = await fetch(ROOT + path.replace(/^\//, ""), {
    credentials: "same-origin",
    headers: options.body ? { "Content-Type": "application/json" } : {},
    ...options,
  });
  let body = null;
  try { body = await resp.json(); } catch (_) { /* not JSON */ }
  if (!resp.ok) {
    const msg = (body && (body.error || body.msg)) || `HTTP ${resp.status}`;
    throw new Error(`${msg} (${resp.status})`);
  }
  return body;
}



/** Replaces `el`'s children, leaving out the nulls of parts not shown (the
 *  DOM would print them as "null"). */
function fill(el, ...children) {
  el.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
}

function notice(text, error) {
  return h("div", { class: error ? "notice error" : "notice", role: error ? "alert" : "status" }, text);
}

function table(headers, rows, empty) {
  if (!rows.length) return h("p", { class: "muted" }, empty);
  return h("table", {},
    h("thead", {}, h("tr", {}, headers.map(([label, cls]) => h("th", { class: cls }, label)))),
    h("tbody", {}, rows));
}

// ---- charts --------------------------------------------------------------

const COLORS = {
  ready: "#2f6fdb", delayed: "#8e44ad", reserved: "#e67e22", dead: "#c0392b",
  publish_rate: "#1a8a4a", consume_rate: "#2f6fdb",
};

/** A line chart of `fields` of `points` (each `{t, …}`), over the window. */
function chart(title, points, fields, windowS, unit) {
  const W = 600, H = 180, L = 48, B = 22, T = 8, R = 8;
  const svgNS = "http://www.w3.org/2000/svg";
  const el = (tag, attrs) => {
    const e = document.createElementNS(svgNS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    return e;
  };
  const now = Date.now();
  const t0 = now - windowS * 1000;
  let max = 0;
  for (const p of points) for (const f of fields) max = Math.max(max, p[f] || 0);
  const top = niceCeil(max);
  const x = (t) => L + ((t - t0) / (now - t0)) * (W - L - R);
  const y = (v) => T + (1 - v / top) * (H - T - B);
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title });
  for (const frac of [0, 0.5, 1]) {
    const v = top * frac;
    svg.append(el("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: "#e3e6eb" }));
    const label = el("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end", "font-size": 11, fill: "#6b7280" });
    label.textContent = fmtAxis(v) + (unit || "");
    svg.append(label);
  }
  for (let m = 0; m <= windowS / 60; m += 2) {
    const label = el("text", { x: x(now - m * 60000), y: H - 6, "text-anchor": m === 0 ? "end" : "middle", "font-size": 11, fill: "#6b7280" });
    label.textContent = m === 0 ? "now" : `-${m}m`;
    svg.append(label);
  }
  for (const f of fields) {
    const pts = points.filter((p) => p[f] !== null && p[f] !== undefined && p.t >= t0);
    if (!pts.length) continue;
    const d = pts.map((p) => `${x(p.t).toFixed(1)},${y(p[f]).toFixed(1)}`).join(" ");
    svg.append(el("polyline", { points: d, fill: "none", stroke: COLORS[f], "stroke-width": 2, "data-series": f }));
    // The latest reading as a dot: also what shows of a single reading.
    const last = pts[pts.length - 1];
    svg.append(el("circle", { cx: x(last.t), cy: y(last[f]), r: 3, fill: COLORS[f] }));
  }
  const legend = h("div", { class: "legend" },
    fields.map((f) => h("span", {}, h("i", { style: { background: COLORS[f] } }), f.replace("_", " "))));
  const box = h("div", { class: "card chart" }, h("h3", {}, title), legend);
  box.insertBefore(svg, legend);
  if (!points.length) box.append(h("p", { class: "muted" }, "No readings yet: they are taken while someone looks."));
  return box;
}

function niceCeil(v) {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

function fmtAxis(v) {
  if (v >= 1e6) return `${(v / 1e6).toFixed(1)}M`;
  if (v >= 1e3) return `${(v / 1e3).toFixed(1)}k`;
  return Number.isInteger(v) ? String(v) : v.toFixed(1);
}

function tile(label, value) {
  return h("div", { class: "tile" }, h("div", { class: "label" }, label), h("div", { class: "value" }, fmt(value)));
}
