// A queue's schedules on its page: each with when it fires, its next and
// last fire, its fires and misses, and a button that pauses or resumes it
// (`GET /namespaces/{ns}/queues/{queue}/schedules`, `POST …/{name}/pause`
// or `…/resume`). Redrawn with the page's numbers. Loaded after `lib.js`,
// before `app.js`.
"use strict";

/** When schedule `s` fires: its cron expression and zone, or its interval. */
function fires(s) {
  if (s.cron) return `${s.cron} (${s.tz ?? "UTC"})`;
  return s.every ? `every ${fmt(s.every)} s` : "–";
}

/** Draws the schedules of `ns`/`queue` into `#schedules`. */
async function loadSchedules(ns, queue) {
  const box = document.getElementById("schedules");
  if (!box) return;
  const base = `/namespaces/${enc(ns)}/queues/${enc(queue)}/schedules`;
  let list;
  try {
    list = (await api(withPool(base))).schedules;
  } catch (e) {
    box.replaceChildren(notice(`Schedules unknown: ${e.message}`, true));
    return;
  }
  const act = async (button, s) => {
    button.disabled = true;
    try {
      await api(withPool(`${base}/${enc(s.name)}/${s.paused ? "resume" : "pause"}`), { method: "POST" });
      loadSchedules(ns, queue);
    } catch (e) {
      button.disabled = false;
      button.after(notice(e.message, true));
    }
  };
  const rows = list.map((s) => h("tr", { "data-schedule": s.name, "data-paused": s.paused ? "yes" : "no" },
    h("td", {}, s.name),
    h("td", {}, fires(s)),
    h("td", {}, s.paused ? "paused" : "active"),
    h("td", {}, when(s.next_ms[0])),
    h("td", {}, when(s.last?.at_ms)),
    h("td", { class: "num" }, fmt(s.fired)),
    h("td", { class: "num" }, fmt(s.missed_fires)),
    h("td", {}, h("button", { type: "button", "data-schedule-pause": s.paused ? "resume" : "pause",
      onclick: (ev) => act(ev.currentTarget, s) }, s.paused ? "Resume" : "Pause"))));
  box.replaceChildren(table(
    [["Name"], ["Fires"], ["State"], ["Next"], ["Last"], ["Fired", "num"], ["Missed", "num"], [""]],
    rows, "No schedule: a tenant makes them with PUT /api/{ns}/{queue}/schedules/{name}."));
}
