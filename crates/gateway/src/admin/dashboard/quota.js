// A namespace's quota on its page: what it is held to, what it sets and
// its pool's, each bound editable (`GET`/`PUT`/`DELETE
// /namespaces/{ns}/quota`); and its usage (`GET /namespaces/{ns}/usage`).
// Loaded after `lib.js`, before `app.js`.
"use strict";

const QUOTA_BOUNDS = [
  ["max_jobs", "jobs held", ""],
  ["max_bytes", "bytes held", "bytes"],
  ["max_queues", "queues", ""],
  ["publish_rate", "publish rate", "jobs/s"],
  ["consume_rate", "consume rate", "jobs/s"],
  ["max_body", "job body", "bytes"],
  ["max_delay", "job delay", "s"],
  ["max_ttl", "job TTL", "s"],
  ["max_tries", "job tries", ""],
  ["weight", "share of a busy server", "weight"],
];

/** What a namespace is held to, for one bound: a weight left unset is 1. */
function heldText(name, value) {
  if (value !== null) return fmt(value);
  return name === "weight" ? "1" : "no bound";
}

/** Draws the quota of `ns` into `#quota`, with `message` above it. */
async function loadQuota(ns, message) {
  const box = document.getElementById("quota");
  const path = withPool(`/namespaces/${enc(ns)}/quota`);
  let q;
  try {
    q = await api(path);
  } catch (e) {
    box.replaceChildren(notice(`Quota unknown: ${e.message}`, true));
    return;
  }
  const inputs = {};
  const rows = QUOTA_BOUNDS.map(([name, label, unit]) => {
    inputs[name] = h("input", {
      type: "number", min: "0", step: "1", name, "aria-label": `${label} set for ${ns}`,
      placeholder: q.pool_quota[name] === undefined ? "none" : `pool: ${q.pool_quota[name]}`,
      value: q.set[name] === undefined ? null : String(q.set[name]),
    });
    return h("tr", { "data-bound": name },
      h("td", {}, label, unit ? h("span", { class: "muted" }, ` (${unit})`) : null),
      h("td", { class: "num", "data-held": q.quota[name] ?? "" }, heldText(name, q.quota[name])),
      h("td", { class: "num" }, q.pool_quota[name] === undefined ? "–" : fmt(q.pool_quota[name])),
      h("td", {}, inputs[name]));
  });
  const act = async (options, done) => {
    try {
      await api(path, options);
      await loadQuota(ns, notice(done));
    } catch (e) {
      box.querySelector(".notice")?.remove();
      box.prepend(notice(e.message, true));
    }
  };
  const save = () => {
    const body = {};
    for (const [name, input] of Object.entries(inputs)) {
      if (input.value.trim() !== "") body[name] = Number(input.value);
    }
    act({ method: "PUT", body: JSON.stringify(body) }, "Quota saved: every gateway holds it within half a second.");
  };
  box.replaceChildren(
    message || "",
    table([["bound"], ["held to", "num"], ["pool's", "num"], ["set for this namespace (empty: the pool's; 0: no bound)"]],
      rows, ""),
    h("div", { class: "actions" },
      h("button", { class: "primary", "data-action": "save-quota", onclick: save }, "Save quota"),
      h("button", { "data-action": "clear-quota",
        onclick: () => act({ method: "DELETE" }, "Quota cleared: the pool's holds.") }, "Clear")),
  );
}

/** The usage of `ns`: what it holds (against its bounds, where it has
 *  some) and what it did; a notice when it cannot be read. */
async function usageTiles(ns) {
  let u;
  try {
    u = await api(withPool(`/namespaces/${enc(ns)}/usage`));
  } catch (e) {
    return notice(`Usage unknown: ${e.message}`, true);
  }
  const refused = Object.values(u.refused).reduce((a, b) => a + b, 0);
  const held = (name, value, bound) => {
    const t = tile(name, value);
    t.setAttribute("data-usage", name);
    if (bound && u.limits[bound] !== null) t.append(h("div", { class: "muted" }, `of ${fmt(u.limits[bound])}`));
    return t;
  };
  return h("div", { class: "tiles" },
    held("jobs", u.jobs, "max_jobs"), held("bytes", u.bytes, "max_bytes"), held("queues", u.queues, "max_queues"),
    held("published", u.published), held("consumed", u.consumed), held("acked", u.acked),
    held("refused", refused));
}
