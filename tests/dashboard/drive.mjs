// Drives Sundial's dashboard in Debian's headless Chromium, as an operator
// would: opens it with the admin password, checks the pool page, goes to a
// namespace, then a queue, finds one dead job by its id and respawns it
// from the dead tab. With DRAIN=1 it checks instead that the pool page
// shows a drain in progress. tests/tests/e2e/dashboard.rs starts the
// gateway, makes the dead jobs (or the drain), runs this, and checks in
// Redis what the click did.
//
// The browser reaches the gateway through a proxy of this script's that
// puts the admin API under a path prefix (`/sundial/`, as an ingress
// would), and every page's text is checked for a `null`, `undefined` or
// `NaN` printed by mistake.
//
// Environment:
//   SUNDIAL_ADMIN_URL   the admin listener, e.g. http://127.0.0.1:7778
//   SUNDIAL_ADMIN_USER, SUNDIAL_ADMIN_PASSWORD
//   NAMESPACE, QUEUE    where the dead jobs are
//   RESPAWN             the id of the dead job to respawn
//   DRAIN=1             only check the pool page's drain (no NAMESPACE,
//                       QUEUE or RESPAWN then)
//   MOVE=<state>        only check that NAMESPACE's page shows its move to
//                       another pool in that state
//   QUOTA=<jobs/s>      only set NAMESPACE's publish rate to that on its
//                       page, and check the page says it holds
//   POLICY=<ms>         only set QUEUE's retry policy (in NAMESPACE) on its
//                       page, after trying a bad one: exponential from
//                       that many ms, 4 tries
//   PAUSE=1             only pause QUEUE (in NAMESPACE) on its page, check
//                       that the namespace's page marks it, and resume it;
//                       then pause and resume NAMESPACE on its page
//   SCHEDULE=<name>     only find that schedule of QUEUE (in NAMESPACE) on
//                       the queue's page, pause it and resume it
//   SCREENSHOTS         a folder to save the pages in (optional)
//   CHROMIUM            the browser (default /usr/bin/chromium)
//
// Prints `respawned <id>` (or `drain pending=<slots> jobs_left=<n>`, the
// move's line, `quota publish_rate=<n> usage jobs=<n>`, `policy <JSON>`, or
// `pause paused=<bool> listed=<bool> resumed=<bool> ns_paused=<bool>
// ns_resumed=<bool>`, or `schedule <name> next=<bool> paused=<bool>
// resumed=<bool>`)
// and exits 0, or prints why and exits 1.
import http from "node:http";
import { chromium } from "playwright-core";

const env = (name, fallback) => {
  const v = process.env[name] ?? fallback;
  if (v === undefined) throw new Error(`${name} is not set`);
  return v;
};
const admin = env("SUNDIAL_ADMIN_URL");
const drain = process.env.DRAIN === "1";
const move = process.env.MOVE;
const quota = process.env.QUOTA;
const policy = process.env.POLICY;
const pause = process.env.PAUSE === "1";
const schedule = process.env.SCHEDULE;
const shots = process.env.SCREENSHOTS;
const PREFIX = "/sundial";
const target = new URL(admin);
// The path-prefix proxy: `/sundial/x` on it is `/x` on the gateway.
const proxy = http.createServer((req, res) => {
  if (!req.url.startsWith(`${PREFIX}/`)) {
    res.writeHead(404).end("outside the prefix");
    return;
  }
  const up = http.request({
    host: target.hostname, port: target.port, method: req.method,
    path: req.url.slice(PREFIX.length), headers: req.headers,
  }, (r) => { res.writeHead(r.statusCode, r.headers); r.pipe(res); });
  up.on("error", (e) => { res.writeHead(502).end(String(e)); });
  req.pipe(up);
});
await new Promise((ok) => proxy.listen(0, "127.0.0.1", ok));
const origin = `http://127.0.0.1:${proxy.address().port}`;
const base = `${origin}${PREFIX}`;

const browser = await chromium.launch({
  executablePath: env("CHROMIUM", "/usr/bin/chromium"),
  // No sandbox: CI runs as root. The rest keeps Chromium off the network
  // (this machine has none, and the page must not need any).
  args: [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
});
const problems = [];
// Refusals a step provokes on purpose: the browser logs each as an error.
let refusalsExpected = 0;
let done = "";
try {
  const context = await browser.newContext({
    httpCredentials: { username: env("SUNDIAL_ADMIN_USER"), password: env("SUNDIAL_ADMIN_PASSWORD") },
    viewport: { width: 1280, height: 860 },
  });
  const page = await context.newPage();
  // Everything the page loads comes from the gateway; no script error, no
  // refused content (a policy violation is logged as a console error).
  page.on("request", (r) => {
    if (!r.url().startsWith(origin) && !r.url().startsWith("data:")) problems.push(`fetched ${r.url()}`);
  });
  page.on("console", (m) => {
    if (m.type() !== "error") return;
    if (refusalsExpected > 0 && m.text().includes("status of 400")) refusalsExpected -= 1;
    else problems.push(`console: ${m.text()}`);
  });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("dialog", (d) => d.accept());
  const shot = async (name) => {
    if (shots) await page.screenshot({ path: `${shots}/${name}.png`, fullPage: true });
  };

  // The pool: its shards are up. (The prefix's root leads to the page.)
  await page.goto(`${base}/`);
  await page.getByRole("heading", { name: "Pool default" }).waitFor();
  await page.locator("tr[data-shard] .pill.up").first().waitFor();
  done = drain ? await showsDrain(page, shot)
    : move ? await showsMove(page, move)
    : quota ? await setsQuota(page, quota, shot)
    : policy ? await setsPolicy(page, policy, shot)
    : pause ? await pausesAndResumes(page, shot)
    : schedule ? await pausesASchedule(page, schedule, shot)
    : await respawnOne(page, shot);
} catch (e) {
  problems.push(e.stack || String(e));
} finally {
  await browser.close();
  proxy.close();
}
if (problems.length) {
  console.error(problems.join("\n"));
  process.exit(1);
}
console.log(done);

/** Fails the run when the page's text shows a value the code printed by
 *  mistake (a missing field drawn as `null`, `undefined` or `NaN`). */
async function clean(page, what) {
  const text = await page.locator("main").innerText();
  const bad = text.match(/\b(null|undefined|NaN)\b/);
  if (bad) problems.push(`the ${what} page shows "${bad[1]}": ${text.slice(Math.max(0, bad.index - 60), bad.index + 30)}`);
}

/** The pool page's drain: slots still to move, a progress bar, jobs left. */
async function showsDrain(page, shot) {
  // The shard that joined shows up once probed (the page reads again every 5 s).
  await page.waitForFunction(() => {
    const shards = document.querySelectorAll("tr[data-shard]");
    return shards.length > 1 && document.querySelectorAll("tr[data-shard] .pill.up").length === shards.length;
  }, null, { timeout: 20000 });
  const row = page.locator("tr[data-drain]").first();
  await row.waitFor();
  const pending = Number(await row.getAttribute("data-drain"));
  const left = Number((await row.locator("td").nth(3).innerText()).replace(/,/g, ""));
  if (!(pending > 0 && left > 0)) throw new Error(`the drain shows ${pending} slots and ${left} jobs to move`);
  await row.locator(".bar > div").waitFor({ state: "attached" });
  await shot("drain");
  return `drain pending=${pending} jobs_left=${left}`;
}

/** The namespace's page: a line that says where it moves, in `state`. */
async function showsMove(page, state) {
  const ns = env("NAMESPACE");
  await page.getByRole("link", { name: "Namespaces" }).click();
  await page.locator(`a[data-namespace="${ns}"]`).click();
  await page.getByRole("heading", { name: `Namespace ${ns}` }).waitFor();
  const line = page.locator(`[data-move="${state}"]`);
  await line.waitFor();
  return (await line.innerText()).toLowerCase();
}

/** The namespace's page: its publish rate set in the quota form, saved,
 *  and shown as what the namespace is held to. */
async function setsQuota(page, rate, shot) {
  const ns = env("NAMESPACE");
  await page.getByRole("link", { name: "Namespaces" }).click();
  await page.locator(`a[data-namespace="${ns}"]`).click();
  await page.getByRole("heading", { name: `Namespace ${ns}` }).waitFor();
  await page.getByLabel(`publish rate set for ${ns}`).fill(rate);
  await page.locator('[data-action="save-quota"]').click();
  await page.getByText("Quota saved").waitFor();
  await page.locator(`tr[data-bound="publish_rate"] td[data-held="${rate}"]`).waitFor();
  // The form survives the page's refresh (every 5 s) with its value.
  await page.waitForTimeout(5500);
  const kept = await page.getByLabel(`publish rate set for ${ns}`).inputValue();
  if (kept !== rate) throw new Error(`the form shows ${kept} after a refresh`);
  await shot("quota");
  const jobs = await page.locator('[data-usage="jobs"] .value').innerText();
  return `quota publish_rate=${rate} usage jobs=${jobs}`;
}

/** The queue's page: Pause, then the namespace's page marks the queue,
 *  then Resume; each step read back from the admin API. */
async function pausesAndResumes(page, shot) {
  const ns = env("NAMESPACE");
  const queue = env("QUEUE");
  const queuePage = `${base}/dashboard/#/ns/${encodeURIComponent(ns)}/${encodeURIComponent(queue)}`;
  const state = () => page.evaluate(async ([n, q]) => {
    const r = await fetch(`../namespaces/${encodeURIComponent(n)}/queues/${encodeURIComponent(q)}/pause`);
    return (await r.json()).paused;
  }, [ns, queue]);
  await page.goto(queuePage);
  await page.getByRole("heading", { name: `Queue ${queue}` }).waitFor();
  await page.locator('[data-pause="pause"]').click();
  await page.locator('p.pause[data-paused="yes"]').waitFor();
  const paused = await state();
  await shot("paused");
  await page.goto(`${base}/dashboard/#/ns/${encodeURIComponent(ns)}`);
  await page.locator(`tr[data-queue="${queue}"]`).waitFor();
  const listed = await page.locator(`tr[data-queue="${queue}"] [data-paused]`).count() === 1;
  await page.goto(queuePage);
  await page.locator('[data-pause="resume"]').click();
  await page.locator('p.pause[data-paused="no"]').waitFor();
  const resumed = !(await state());
  // The namespace's own pause, on its page.
  const nsState = () => page.evaluate(async (n) => {
    const r = await fetch(`../namespaces/${encodeURIComponent(n)}/pause`);
    return (await r.json()).paused;
  }, ns);
  await page.goto(`${base}/dashboard/#/ns/${encodeURIComponent(ns)}`);
  await page.locator('[data-ns-pause="pause"]').click();
  await page.locator('p.ns-pause[data-paused="yes"]').waitFor();
  const nsPaused = await nsState();
  await shot("namespace-paused");
  await page.locator('[data-ns-pause="resume"]').click();
  await page.locator('p.ns-pause[data-paused="no"]').waitFor();
  const nsResumed = !(await nsState());
  await clean(page, "queue");
  return `pause paused=${paused} listed=${listed} resumed=${resumed} ns_paused=${nsPaused} ns_resumed=${nsResumed}`;
}

/** The queue's page lists schedule `name` with its next fire; Pause,
 *  then Resume, each read back from the admin API. */
async function pausesASchedule(page, name, shot) {
  const ns = env("NAMESPACE");
  const queue = env("QUEUE");
  const state = () => page.evaluate(async ([n, q, s]) => {
    const r = await fetch(`../namespaces/${encodeURIComponent(n)}/queues/${encodeURIComponent(q)}/schedules`);
    return (await r.json()).schedules.find((x) => x.name === s)?.paused;
  }, [ns, queue, name]);
  await page.goto(`${base}/dashboard/#/ns/${encodeURIComponent(ns)}/${encodeURIComponent(queue)}`);
  const row = page.locator(`tr[data-schedule="${name}"]`);
  await row.waitFor();
  const next = !(await row.locator("td").nth(3).innerText()).includes("–");
  await row.locator('[data-schedule-pause="pause"]').click();
  await page.locator(`tr[data-schedule="${name}"][data-paused="yes"]`).waitFor();
  const paused = await state();
  await shot("schedule-paused");
  await page.locator(`tr[data-schedule="${name}"] [data-schedule-pause="resume"]`).click();
  await page.locator(`tr[data-schedule="${name}"][data-paused="no"]`).waitFor();
  const resumed = (await state()) === false;
  return `schedule ${name} next=${next} paused=${paused} resumed=${resumed}`;
}

/** The queue's page: a policy the gateway refuses (the page says why),
 *  then a good one saved, and kept through a refresh. */
async function setsPolicy(page, delay, shot) {
  const ns = env("NAMESPACE");
  const queue = env("QUEUE");
  await page.goto(`${base}/dashboard/#/ns/${encodeURIComponent(ns)}/${encodeURIComponent(queue)}`);
  await page.getByRole("heading", { name: `Queue ${queue}` }).waitFor();
  await page.getByLabel(`backoff of ${queue}`).selectOption("fixed");
  refusalsExpected += 1;
  await page.locator('[data-action="save-policy"]').click();
  await page.locator("#policy .notice.error").getByText("initial_delay_ms").waitFor();
  await page.getByLabel(`backoff of ${queue}`).selectOption("exponential");
  await page.getByLabel(`first retry's delay of ${queue}`).fill(delay);
  await page.getByLabel(`tries (when a publish names none) of ${queue}`).fill("4");
  await page.locator('[data-action="save-policy"]').click();
  await page.getByText("Policy saved").waitFor();
  // The form survives the page's refresh (every 5 s) with its values.
  await page.waitForTimeout(5500);
  const kept = await page.getByLabel(`first retry's delay of ${queue}`).inputValue();
  if (kept !== delay) throw new Error(`the form shows ${kept} after a refresh`);
  await clean(page, "queue");
  await shot("policy");
  const saved = await page.evaluate(async ([n, q]) => {
    const r = await fetch(`../namespaces/${encodeURIComponent(n)}/queues/${encodeURIComponent(q)}/policy`);
    return (await r.json()).policy;
  }, [ns, queue]);
  return `policy ${JSON.stringify(saved)}`;
}

/** Namespaces → the namespace → its queues, then the queue, and one dead
 *  job respawned. */
async function respawnOne(page, shot) {
  const ns = env("NAMESPACE");
  const queue = env("QUEUE");
  const respawn = env("RESPAWN");
  await clean(page, "pool");
  await shot("pool");

  // The queues that need a look, across namespaces: ours, with its dead jobs.
  await page.getByRole("link", { name: "Attention" }).click();
  await page.locator(`tr[data-attention="${ns}/${queue}"]`).waitFor();
  await clean(page, "attention");

  // Namespaces → the namespace → its queues, with the dead jobs counted.
  await page.getByRole("link", { name: "Namespaces" }).click();
  await page.locator(`a[data-namespace="${ns}"]`).click();
  await page.getByRole("heading", { name: `Namespace ${ns}` }).waitFor();
  const row = page.locator(`tr[data-queue="${queue}"]`);
  await row.waitFor();
  const dead = Number((await row.locator("td").nth(4).innerText()).replace(/,/g, ""));
  if (!(dead >= 1)) throw new Error(`the queue list shows ${dead} dead jobs`);
  await clean(page, "namespace");
  // The filter hides the queues whose names do not match, and the list
  // sorts by a column.
  await page.getByLabel("filter queues").fill("no-such-queue");
  await page.getByText("No queue matches the filter.").waitFor();
  await page.getByLabel("filter queues").fill(queue.slice(0, 3));
  await row.waitFor();
  await page.locator('button[data-sort="dead"]').click();
  await page.locator('button[data-sort="dead"][aria-sort="descending"]').waitFor();
  await shot("namespace");

  // The queue: its charts, and its dead letter with our job in it.
  await row.getByRole("link", { name: queue }).click();
  await page.getByRole("heading", { name: `Queue ${queue}` }).waitFor();
  await page.locator(".chart svg").first().waitFor();
  // Found by its id, whatever its state.
  await page.getByLabel("find a job by id").fill(respawn);
  await page.locator('[data-action="find-job"]').click();
  await page.locator('[data-found="dead"]').waitFor();
  // The dead tab lists it, with its actions.
  await page.locator('[data-tab="dead"]').click();
  const job = page.locator(`tr[data-job="${respawn}"]`);
  await job.waitFor();
  await clean(page, "queue");
  // Let the charts gather a second reading (one per 5 s) before the picture.
  if (shots) {
    await page.waitForFunction(
      () => [...document.querySelectorAll(".chart polyline")].some((l) => l.getAttribute("points").includes(" ")),
      null, { timeout: 15000 });
  }
  await shot("queue");

  // Respawn that one job.
  await job.locator("input[type=checkbox]").check();
  await page.locator('[data-action="respawn-selected"]').click();
  await page.getByText("Respawned 1 job(s)").waitFor();
  if (await page.locator(`tr[data-job="${respawn}"]`).count() !== 0) {
    throw new Error("the respawned job is still listed as dead");
  }
  await shot("respawned");
  return `respawned ${respawn}`;
}
