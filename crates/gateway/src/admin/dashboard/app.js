// Sundial's dashboard: one page over the admin API of the gateway that
// serves it. No framework and no build step; everything the page shows
// comes from the same origin (the Content-Security-Policy allows nothing
// else), with the browser's basic-auth credentials. `lib.js` (helpers and
// charts), `quota.js`, `policy.js` and `jobs.js` load before this file.
//
// Views, by the URL's hash:
//   #/                     the pool: shards, health, pump leases, drains
//   #/namespaces           namespaces of the pool (those with a token)
//   #/attention            queues of every namespace with dead jobs or a
//                          ready job that waited a minute or more
//   #/ns/NS                a namespace's queues, backlog and rates, and
//                          its usage and quota (`quota.js`)
//   #/ns/NS/QUEUE          one queue: charts, its jobs by state (`jobs.js`)
//                          and its retry policy (`policy.js`)
"use strict";

const REFRESH_MS = 5000;
const view = document.getElementById("view");
const statusLine = document.getElementById("status");
const poolSelect = document.getElementById("pool");

let pool = new URLSearchParams(location.search).get("pool") || localStorage.getItem("sundial.pool") || "default";
let refreshTimer = null;
// Bumped at each navigation: a slow answer for a view left meanwhile is
// dropped instead of drawn over the new one.
let generation = 0;

function withPool(path) {
  return path + (path.includes("?") ? "&" : "?") + "pool=" + enc(pool);
}

function setStatus(text, error) {
  statusLine.textContent = text;
  statusLine.classList.toggle("error", !!error);
}

// ---- views ---------------------------------------------------------------

async function overview(gen) {
  const status = await api(`/pools/${enc(pool)}`);
  if (gen !== generation) return;
  const anyCluster = status.shards.some((s) => s.kind === "cluster");
  const shards = status.shards.map((s) => {
    const health = s.health || {};
    const pumps = s.pumps || {};
    const processes = (pumps.processes || []).map((p) =>
      h("div", { class: "mono" }, `${p.id}: ${p.leases} lease(s)${p.live ? "" : " (gone)"}`));
    return h("tr", { "data-shard": s.name },
      h("td", {}, h("strong", {}, s.name), h("div", { class: "muted" }, s.kind)),
      // A shard that joined a moment ago has no probe yet.
      h("td", {}, s.health
        ? h("span", { class: `pill ${health.up ? "up" : "down"}` }, health.up ? "up" : "down")
        : h("span", { class: "pill warn" }, "not probed yet"),
        health.up && health.ping_ms != null ? h("div", { class: "muted" }, `${health.ping_ms.toFixed(1)} ms`) : null,
        health.error ? h("div", { class: "muted" }, health.error) : null,
        (health.primaries_down || []).length
          ? h("div", { class: "pill warn", "data-primaries-down": health.primaries_down.length },
            `primaries down: ${health.primaries_down.join(", ")}`) : null),
      h("td", { class: "num" }, fmt(s.weight)),
      h("td", { class: "num" }, fmt(s.slots)),
      h("td", { class: "num" }, fmt(s.slots_held)),
      h("td", {}, pumps.error ? h("span", { class: "pill down" }, pumps.error) : processes,
        pumps.unleased ? h("div", { class: "pill warn" }, `${pumps.unleased} unleased`) : null),
      anyCluster ? h("td", {}, (s.cluster_primaries || []).map((c) =>
        h("div", { class: "mono" }, `${c.addr} ${c.connected ? "" : "(down) "}${c.hash_slots} hash slots`))) : null,
    );
  });
  const draining = Array.isArray(status.draining) ? status.draining : [];
  const drains = draining.map((d) => {
    const done = d.slots_moved ? (d.slots_moved - d.slots_pending) / d.slots_moved : 1;
    return h("tr", { "data-drain": d.slots_pending },
      h("td", { class: "mono" }, JSON.stringify(d.layout)),
      h("td", { class: "num" }, `${fmt(d.slots_moved - d.slots_pending)} / ${fmt(d.slots_moved)}`),
      h("td", {}, h("div", { class: "bar", title: `${Math.round(done * 100)}%` },
        h("div", { style: { width: `${(done * 100).toFixed(1)}%` } }))),
      h("td", { class: "num" }, fmt(d.jobs_left)));
  });
  fill(view,
    h("h1", {}, `Pool ${status.pool}`),
    h("div", { class: "tiles" },
      tile("shards", status.shards.length),
      tile("slots", status.slots),
      tile("lanes per queue", status.lanes),
      tile("shards up", status.shards.filter((s) => s.health && s.health.up).length)),
    h("h2", {}, "Shards and pumps"),
    table([["shard"], ["health"], ["weight", "num"], ["slots", "num"], ["slots held", "num"], ["pump processes"], ...(anyCluster ? [["cluster primaries"]] : [])],
      shards, "No shards."),
    h("h2", {}, "Drains"),
    status.draining && status.draining.error ? notice(`Drains unknown: ${status.draining.error}`, true)
      : table([["layout"], ["slots drained", "num"], ["progress"], ["jobs left", "num"]], drains,
        "Nothing is draining: every slot's jobs are on the shard that holds it."),
    mover(status.mover),
  );
}

// What this gateway's mover does: it copies the jobs of moved slots to
// their new shard (each gateway moves the slots whose lease it holds).
function mover(m) {
  if (!m || m.state === "idle") return null;
  const text = m.state === "waiting"
    ? `Mover waiting: ${m.reason || "not yet"}`
    : `Mover on this gateway: moving ${fmt(m.slots_moving)} slot(s)${m.reason ? ` (${m.reason})` : ""}`;
  return h("p", { class: "muted", "data-mover": m.state },
    text, `; ${fmt(m.jobs_moved)} job(s) moved by this gateway.`);
}


// Every namespace's queues that need a look: dead jobs, or work waiting.
async function attention(gen) {
  const r = await api(withPool("/attention"));
  if (gen !== generation) return;
  const wait = (s) => (s >= 3600 ? `${(s / 3600).toFixed(1)} h` : s >= 60 ? `${Math.round(s / 60)} min` : `${s} s`);
  const rows = r.queues.map((q) => h("tr", { "data-attention": `${q.namespace}/${q.queue}` },
    h("td", {}, h("a", { href: `#/ns/${enc(q.namespace)}` }, q.namespace)),
    h("td", {}, h("a", { href: `#/ns/${enc(q.namespace)}/${enc(q.queue)}` }, q.queue)),
    h("td", { class: "num" }, fmt(q.dead)),
    h("td", { class: "num" }, fmt(q.ready)),
    h("td", { class: "num" }, q.ready ? wait(q.oldest_ready_s) : "–")));
  fill(view,
    h("h1", {}, `Queues that need a look in pool ${r.pool}`),
    h("p", { class: "muted" }, `Every namespace's queues with dead jobs, or whose next ready job has waited ${wait(r.min_age_s)} or more; dead jobs first.`),
    table([["namespace"], ["queue"], ["dead", "num"], ["ready", "num"], ["oldest ready waits", "num"]], rows,
      "Nothing needs a look: no dead job, and no ready job waits long."),
    r.truncated ? h("p", { class: "muted" }, "The first 500 are shown.") : null);
}

async function namespaces(gen) {
  const r = await api(withPool("/namespaces"));
  if (gen !== generation) return;
  view.replaceChildren(
    h("h1", {}, `Namespaces of pool ${r.pool}`),
    r.namespaces.length
      ? h("div", { class: "card" }, h("ul", {}, r.namespaces.map((ns) =>
        h("li", {}, h("a", { href: `#/ns/${enc(ns)}`, "data-namespace": ns }, ns)))))
      : h("p", { class: "muted" }, "No namespace has a token in this pool yet."),
  );
}

// How the namespace view sorts and filters its queues: kept across
// refreshes and while browsing.
const queueView = { key: "queue", desc: false, filter: "" };
const QUEUE_COLUMNS = [["queue", "queue"], ["ready", "ready"], ["delayed", "delayed"], ["reserved", "reserved"],
  ["dead", "dead"], ["publish", "publish_rate"], ["consume", "consume_rate"]];
let nsShown = null;

async function queues(gen, ns) {
  // One page, read again at each refresh: each listed queue costs the
  // gateway a read of its counters.
  const r = await api(withPool(`/namespaces/${enc(ns)}/queues?limit=500`));
  // Its move to another pool, if it has one, and while it goes on, how far
  // it has come. (A page without it, should it fail, rather than no page.)
  const move = r.move;
  const progress = move && move.state !== "moved"
    ? await api(withPool(`/namespaces/${enc(ns)}/move`)).catch(() => null) : null;
  const usage = await usageTiles(ns);
  const nsPause = await api(withPool(`/namespaces/${enc(ns)}/pause`));
  if (gen !== generation) return;
  // The quota form and the queue filter stay between refreshes (so that
  // an edit survives); the rest is redrawn.
  if (!document.getElementById("ns-live")) {
    const filter = h("input", { type: "search", placeholder: "filter queues", "aria-label": "filter queues",
      value: queueView.filter, oninput: (e) => { queueView.filter = e.target.value; drawQueues(); } });
    fill(view,
      h("div", { class: "crumbs" }, h("a", { href: "#/namespaces" }, "Namespaces"), " / ", ns),
      h("h1", {}, `Namespace ${ns}`),
      h("div", { id: "ns-live" }),
      h("h2", {}, "Queues"),
      h("div", { class: "actions" }, filter),
      h("div", { id: "ns-queues" }),
      h("h2", {}, "Quota"),
      h("div", { id: "quota" }));
    await loadQuota(ns);
  }
  const totals = r.queues.reduce((t, q) => {
    for (const k of ["ready", "delayed", "reserved", "dead"]) t[k] += q[k];
    return t;
  }, { ready: 0, delayed: 0, reserved: 0, dead: 0 });
  fill(document.getElementById("ns-live"),
    move ? h("p", { class: move.state === "moved" ? "muted" : "pill warn", "data-move": move.state },
      move.state === "moved"
        ? `Moved from pool ${move.from} to pool ${move.to}: its tokens of this pool are served there.`
        : `Moving from pool ${move.from} to pool ${move.to} (${move.state}): ` +
          (progress ? `${fmt(progress.jobs_left)} job(s) left in pool ${move.from}, ${fmt(progress.jobs_moved)} moved by this gateway; ` : "") +
          `\`sundial namespace moving ${ns} --pool ${pool} --watch\` follows it.`) : null,
    pauseBar(`/namespaces/${enc(ns)}`, nsPause.paused, () => show(), "namespace"),
    h("div", { class: "tiles" }, Object.entries(totals).map(([k, v]) => tile(k, v))),
    h("h2", {}, "Usage"),
    usage);
  nsShown = { ns, queues: r.queues, more: !!r.next_cursor };
  drawQueues();
}

/** The namespace's queues as `queueView` sorts and filters them. */
function drawQueues() {
  const box = document.getElementById("ns-queues");
  if (!box || !nsShown) return;
  const { ns, queues: all, more } = nsShown;
  const { key, desc, filter } = queueView;
  const shown = all.filter((q) => q.queue.toLowerCase().includes(filter.toLowerCase()));
  const value = (q) => (key === "queue" ? q.queue : (q[key] ?? -1));
  shown.sort((a, b) => {
    const c = value(a) < value(b) ? -1 : value(a) > value(b) ? 1 : 0;
    return desc ? -c : c;
  });
  const headers = QUEUE_COLUMNS.map(([label, k]) => [h("button", { class: "sort", "data-sort": k,
    "aria-sort": k === key ? (desc ? "descending" : "ascending") : null,
    onclick: () => {
      queueView.desc = queueView.key === k ? !queueView.desc : k !== "queue";
      queueView.key = k;
      drawQueues();
    } }, label, k === key ? (desc ? " ▼" : " ▲") : ""), k === "queue" ? "" : "num"]);
  const rows = shown.map((q) => h("tr", { "data-queue": q.queue },
    h("td", {}, h("a", { href: `#/ns/${enc(ns)}/${enc(q.queue)}` }, q.queue),
      q.paused ? h("span", { class: "muted", "data-paused": "" }, " (paused)") : null),
    ["ready", "delayed", "reserved", "dead"].map((k) => h("td", { class: "num" }, fmt(q[k]))),
    h("td", { class: "num" }, rate(q.publish_rate)),
    h("td", { class: "num" }, rate(q.consume_rate))));
  fill(box,
    table(headers, rows, all.length ? "No queue matches the filter." : "No queue has been published to in this namespace."),
    more ? h("p", { class: "muted" }, "The first 500 queues by name are shown (and counted above); `sundial queue list` pages through all.") : null);
}

// The queue view keeps its jobs panel between refreshes (so that a tab, a
// page and a selection survive); only the numbers and charts are redrawn.
async function queue(gen, ns, q) {
  const base = `/namespaces/${enc(ns)}/queues/${enc(q)}`;
  // Reading the queue is what records a point of its history.
  const stats = await api(withPool(base));
  const history = await api(withPool(`${base}/history`));
  if (gen !== generation) return;
  if (!document.getElementById("queue-live")) {
    view.replaceChildren(
      h("div", { class: "crumbs" }, h("a", { href: "#/namespaces" }, "Namespaces"), " / ",
        h("a", { href: `#/ns/${enc(ns)}` }, ns), " / ", q),
      h("h1", {}, `Queue ${q}`),
      h("div", { id: "queue-live" }),
      h("h2", {}, "Jobs"),
      h("div", { id: "jobs" }),
      h("h2", {}, "Schedules"),
      h("div", { id: "schedules" }),
      h("h2", {}, "Retry policy"),
      h("div", { id: "policy" }));
    jobsPanel(document.getElementById("jobs"), ns, q);
    // Drawn once: the form stays between refreshes, so that an edit survives.
    loadPolicy(ns, q);
  }
  loadSchedules(ns, q);
  const live = document.getElementById("queue-live");
  live.replaceChildren(
    pauseBar(base, stats.paused, () => show()),
    h("div", { class: "tiles" },
      ["ready", "delayed", "reserved", "dead"].map((k) => tile(k, stats[k])),
      tile("published", stats.published_total),
      h("div", { class: "tile" }, h("div", { class: "label" }, "publish / consume"),
        h("div", { class: "value" }, `${rate(stats.publish_rate)} · ${rate(stats.consume_rate)}`))),
    h("div", { class: "charts" },
      chart("Backlog", history.points, ["ready", "delayed", "reserved", "dead"], history.window_s),
      chart("Rates", history.points, ["publish_rate", "consume_rate"], history.window_s, "/s")));
}

// Whether the queue's (or, with `kind` "namespace", every queue of the
// namespace's) consumers get jobs, and a button that pauses or resumes it
// (`PUT`/`DELETE …/pause`); `done` redraws the page.
function pauseBar(base, paused, done, kind = "queue") {
  const act = async (button) => {
    button.disabled = true;
    try {
      await api(withPool(`${base}/pause`), { method: paused ? "DELETE" : "PUT" });
      done();
    } catch (e) {
      button.disabled = false;
      button.after(notice(e.message, true));
    }
  };
  const ns = kind === "namespace";
  const button = h("button", { type: "button", [ns ? "data-ns-pause" : "data-pause"]: paused ? "resume" : "pause",
    onclick: (ev) => act(ev.currentTarget) },
  paused ? (ns ? "Resume the namespace" : "Resume") : (ns ? "Pause the namespace" : "Pause"));
  const text = ns
    ? (paused ? "Paused: no queue of this namespace gives jobs (publishes, timers and TTRs go on). "
      : "Its queues give jobs, unless paused themselves. ")
    : (paused ? "Paused: consumers get no job (publishes, timers and TTRs go on). " : "Consumers get jobs. ");
  return h("p", { class: ns ? "pause ns-pause" : "pause", "data-paused": paused ? "yes" : "no" }, text, button);
}

// ---- navigation ----------------------------------------------------------

function route() {
  let parts;
  try {
    parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  } catch (_) {
    parts = []; // a hash that is not valid percent-encoding: the pool page
  }
  if (parts[0] === "namespaces") return { nav: "namespaces", run: (gen) => namespaces(gen) };
  if (parts[0] === "attention") return { nav: "attention", run: (gen) => attention(gen) };
  if (parts[0] === "ns" && parts.length === 2) return { nav: "namespaces", run: (gen) => queues(gen, parts[1]) };
  if (parts[0] === "ns" && parts.length === 3) return { nav: "namespaces", run: (gen) => queue(gen, parts[1], parts[2]) };
  return { nav: "overview", run: (gen) => overview(gen) };
}

async function show() {
  clearTimeout(refreshTimer);
  const gen = ++generation;
  const r = route();
  document.querySelectorAll("header nav a").forEach((a) => a.classList.toggle("active", a.dataset.nav === r.nav));
  const tick = async () => {
    // A tab in the background asks nothing: each refresh costs the gateway
    // reads of Redis.
    if (document.hidden) {
      refreshTimer = setTimeout(tick, REFRESH_MS);
      return;
    }
    try {
      await r.run(gen);
      if (gen === generation) setStatus(`updated ${new Date().toLocaleTimeString()}`);
    } catch (e) {
      if (gen !== generation) return;
      setStatus(e.message, true);
      if (!view.querySelector("h1")) view.replaceChildren(notice(e.message, true));
    }
    if (gen === generation) refreshTimer = setTimeout(tick, REFRESH_MS);
  };
  view.replaceChildren(h("p", { class: "muted" }, "Loading…"));
  await tick();
}

async function start() {
  try {
    const pools = await api("/pools");
    if (!pools.includes(pool)) pool = pools.includes("default") ? "default" : pools[0];
    poolSelect.replaceChildren(...pools.map((p) => h("option", { value: p, selected: p === pool }, p)));
  } catch (e) {
    setStatus(e.message, true);
  }
  poolSelect.addEventListener("change", () => {
    pool = poolSelect.value;
    localStorage.setItem("sundial.pool", pool);
    // Back to the pool page (a namespace belongs to one pool); a hash
    // change shows it, else show it here.
    if (location.hash && location.hash !== "#/") location.hash = "#/";
    else show();
  });
  window.addEventListener("hashchange", show);
  show();
}

start();
