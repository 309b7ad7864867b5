// A queue's retry policy on its page: each field editable, saved whole
// (`GET`/`PUT`/`DELETE /namespaces/{ns}/queues/{queue}/policy`). A publish
// packs the policy into each job, so a change holds for jobs published
// after it. Loaded after `lib.js`, before `app.js`.
"use strict";

// The numeric fields: name, label, unit, and the input's bounds.
const POLICY_FIELDS = [
  ["initial_delay_ms", "first retry's delay", "ms", "0", "1"],
  ["multiplier", "multiplier (exponential)", "", "1", "0.1"],
  ["max_delay_ms", "longest delay", "ms", "0", "1"],
  ["jitter_percent", "jitter", "%", "0", "1"],
  ["tries", "tries (when a publish names none)", "", "1", "1"],
  ["max_retry_ms", "retried for at most", "ms since publish", "1", "1"],
];

/** Draws the policy of `ns`/`queue` into `#policy`, with `message` above it. */
async function loadPolicy(ns, queue, message) {
  const box = document.getElementById("policy");
  const path = withPool(`/namespaces/${enc(ns)}/queues/${enc(queue)}/policy`);
  let p;
  try {
    p = (await api(path)).policy;
  } catch (e) {
    box.replaceChildren(notice(`Policy unknown: ${e.message}`, true));
    return;
  }
  const backoff = h("select", { name: "backoff", "aria-label": `backoff of ${queue}` },
    ["", "fixed", "exponential"].map((v) => h("option", { value: v, selected: (p.backoff ?? "") === v ? "" : null },
      v || "none (ready again at once)")));
  const inputs = {};
  const rows = POLICY_FIELDS.map(([name, label, unit, min, step]) => {
    inputs[name] = h("input", {
      type: "number", min, step, name, "aria-label": `${label} of ${queue}`, placeholder: "not set",
      value: p[name] === undefined ? null : String(p[name]),
    });
    return h("tr", { "data-policy": name },
      h("td", {}, label, unit ? h("span", { class: "muted" }, ` (${unit})`) : null),
      h("td", {}, inputs[name]));
  });
  const act = async (options, done) => {
    try {
      await api(path, options);
      await loadPolicy(ns, queue, notice(done));
    } catch (e) {
      box.querySelector(".notice")?.remove();
      box.prepend(notice(e.message, true));
    }
  };
  const save = () => {
    // Text a number field cannot read is "" to the script: refused here
    // rather than saved as "not set".
    const unread = Object.entries(inputs).find(([, input]) => input.validity.badInput);
    if (unread) {
      box.querySelector(".notice")?.remove();
      box.prepend(notice(`${unread[0]}: not a number`, true));
      return;
    }
    const body = {};
    if (backoff.value) body.backoff = backoff.value;
    for (const [name, input] of Object.entries(inputs)) {
      if (input.value.trim() !== "") body[name] = Number(input.value);
    }
    act({ method: "PUT", body: JSON.stringify(body) },
      "Policy saved: jobs published from now on carry it (every gateway within half a second).");
  };
  box.replaceChildren(
    message || "",
    table([["field"], ["set (empty: not set)"]],
      [h("tr", { "data-policy": "backoff" }, h("td", {}, "backoff"), h("td", {}, backoff)), ...rows], ""),
    h("div", { class: "actions" },
      h("button", { class: "primary", "data-action": "save-policy", onclick: save }, "Save policy"),
      h("button", { "data-action": "clear-policy",
        onclick: () => act({ method: "DELETE" }, "Policy cleared: failed jobs are ready again at once.") }, "Clear")),
  );
}
