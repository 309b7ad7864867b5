// The queue view's jobs: by state in tabs (ready, delayed, reserved,
// dead), a page at a time (`GET …/jobs?state=` and its `next_cursor`), and
// one job found by its id. The dead tab keeps its actions: respawn or
// delete the jobs picked, or all of them. Loaded after `lib.js`, before
// `app.js`, which calls `jobsPanel` once per queue view.
"use strict";

const JOB_PAGE = 50;
// Per state: the column of the time of that state, and its field.
const STATE_TIME = {
  ready: ["ready since", "ready_since_ms"],
  delayed: ["due", "due_at_ms"],
  reserved: ["TTR ends", "ttr_deadline_ms"],
  dead: ["died", "died_at_ms"],
};

/** Draws the jobs of queue `q` of namespace `ns` into `box`. The panel
 *  keeps its tab, page and selection; `reload()` reads its page again. */
function jobsPanel(box, ns, q) {
  const base = `namespaces/${enc(ns)}/queues/${enc(q)}`;
  // The cursors of the pages shown so far: the last is this page's.
  const at = { state: "ready", cursors: [""] };
  const list = h("div", { id: "job-list" });
  const tabs = Object.keys(STATE_TIME).map((s) => h("button", {
    role: "tab", "data-tab": s, "aria-selected": String(s === at.state),
    onclick: () => { at.state = s; at.cursors = [""]; show(); },
  }, s));
  const found = h("div", { id: "job-found" });
  const idInput = h("input", { type: "search", placeholder: "job id", "aria-label": "find a job by id", size: 30 });
  const lookup = h("form", { class: "actions", onsubmit: (e) => { e.preventDefault(); findJob(base, idInput.value.trim(), found); } },
    idInput, h("button", { type: "submit", "data-action": "find-job" }, "Find"));
  box.replaceChildren(lookup, found, h("div", { class: "tabs", role: "tablist" }, tabs), list);

  async function show(message) {
    tabs.forEach((t) => t.setAttribute("aria-selected", String(t.dataset.tab === at.state)));
    const cursor = at.cursors[at.cursors.length - 1];
    let page;
    try {
      page = await api(withPool(`${base}/jobs?state=${at.state}&limit=${JOB_PAGE}&preview=200&cursor=${enc(cursor)}`));
    } catch (e) {
      fill(list, notice(`The ${at.state} jobs could not be read: ${e.message}`, true),
        h("button", { onclick: () => show() }, "Reload"));
      return;
    }
    const pager = h("div", { class: "actions" },
      h("button", { "data-action": "page-first", disabled: at.cursors.length === 1,
        onclick: () => { at.cursors = [""]; show(); } }, "First page"),
      h("button", { "data-action": "page-next", disabled: !page.next_cursor,
        onclick: () => { at.cursors.push(page.next_cursor); show(); } }, "Next page"),
      h("span", { class: "muted" }, `page ${at.cursors.length}`));
    const selected = new Set();
    const dead = at.state === "dead" ? deadActions(base, selected, page, show) : null;
    const [label, field] = STATE_TIME[at.state];
    const rows = page.jobs.map((j) => h("tr", { "data-job": j.job_id },
      dead ? h("td", {}, h("input", { type: "checkbox", "aria-label": `select ${j.job_id}`,
        onchange: (e) => { e.target.checked ? selected.add(j.job_id) : selected.delete(j.job_id); dead.picked(); } })) : null,
      h("td", { class: "mono" }, j.job_id),
      h("td", {}, when(j.published_at_ms)),
      h("td", {}, when(j[field])),
      h("td", { class: "num" }, fmt(j.remain_tries)),
      h("td", { class: "num" }, fmt(j.delivery)),
      h("td", { class: "num", "data-priority": "" }, fmt(j.priority || 0)),
      h("td", { "data-reason": "" }, j.reason || ""),
      h("td", { class: "mono preview" }, preview(j.body_preview, j.body_size),
        j.attributes ? h("div", { class: "muted" }, JSON.stringify(j.attributes)) : null)));
    const headers = [...(dead ? [[""]] : []), ["job"], ["published"], [label], ["tries left", "num"], ["deliveries", "num"], ["priority", "num"], ["last failure"], ["body"]];
    fill(list, message, dead && dead.bar,
      table(headers, rows, page.next_cursor ? `No ${at.state} job on this page of reads: try the next page.` : `No ${at.state} job.`),
      pager);
  }
  show();
  return { reload: () => show() };
}

/** The dead tab's buttons: respawn or delete the jobs picked, or all. */
function deadActions(base, selected, page, reload) {
  const buttons = [];
  const act = async (what, body, confirmText) => {
    if (confirmText && !confirm(confirmText)) return;
    buttons.forEach((b) => { b.disabled = true; });
    try {
      const r = await api(withPool(`${base}/deadletter/${what}`), { method: "POST", body: JSON.stringify(body) });
      const n = what === "respawn" ? r.respawned : r.deleted;
      const missing = r.not_found && r.not_found.length ? `, ${r.not_found.length} no longer dead` : "";
      await reload(notice(`${what === "respawn" ? "Respawned" : "Deleted"} ${n} job(s)${missing}; ${r.deadletter_size} left in the dead letter.`));
    } catch (e) {
      await reload(notice(`Failed: ${e.message}`, true));
    }
  };
  const pick = (b) => { buttons.push(b); return b; };
  const respawnSel = pick(h("button", { class: "primary", disabled: true, "data-action": "respawn-selected",
    onclick: () => act("respawn", { ids: [...selected] }) }, "Respawn selected"));
  const deleteSel = pick(h("button", { class: "danger", disabled: true, "data-action": "delete-selected",
    onclick: () => act("delete", { ids: [...selected] }, `Delete ${selected.size} dead job(s) for good?`) }, "Delete selected"));
  const bar = h("div", { class: "actions" }, respawnSel, deleteSel,
    pick(h("button", { "data-action": "respawn-all", disabled: !page.jobs.length,
      onclick: () => act("respawn", { all: true }, "Respawn every dead job of this queue?") }, "Respawn all")),
    pick(h("button", { class: "danger", "data-action": "delete-all", disabled: !page.jobs.length,
      onclick: () => act("delete", { all: true }, "Delete every dead job of this queue for good?") }, "Delete all")));
  return { bar, picked: () => { respawnSel.disabled = deleteSel.disabled = selected.size === 0; } };
}

/** Looks job `id` up in the queue, whatever its state, and shows it. */
async function findJob(base, id, box) {
  if (!id) { fill(box); return; }
  try {
    const j = await api(withPool(`${base}/jobs/${enc(id)}?preview=1000`));
    fill(box, h("div", { class: "card", "data-found": j.state },
      h("h3", {}, "Job ", h("span", { class: "mono" }, j.job_id), " ", h("span", { class: "pill" }, j.state)),
      h("p", {}, `${fmt(j.remain_tries)} tries left; published ${fmt(Math.round(j.elapsed_ms / 1000))} s ago; `,
        j.ttl ? `expires in ${fmt(j.ttl)} s` : "never expires",
        `; delivered ${fmt(j.delivery)} time(s)`, j.priority ? `; priority ${fmt(j.priority)}` : ""),
      j.reason ? h("p", { "data-reason": "" }, `Last failure: ${j.reason}`) : null,
      j.attributes ? h("p", { class: "mono" }, JSON.stringify(j.attributes)) : null,
      h("pre", { class: "mono preview" }, preview(j.body_preview, j.body_size))));
  } catch (e) {
    fill(box, notice(e.message.startsWith("job not found") ? `No job ${id} in this queue.` : e.message, true));
  }
}

/** The body preview as text when it reads as UTF-8, else as bytes. A
 *  preview cut inside a character is still text: streaming, the decoder
 *  keeps an unfinished last character instead of refusing it. */
function preview(b64, size) {
  const bytes = Uint8Array.from(atob(b64 || ""), (c) => c.charCodeAt(0));
  let text;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes, { stream: size > bytes.length });
  } catch (_) { text = `${bytes.length} bytes (binary)`; }
  return size > bytes.length ? `${text}… (${fmt(size)} bytes)` : text;
}
