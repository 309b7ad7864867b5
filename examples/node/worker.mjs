// A Sundial worker: long-polls a queue, touches a long job to keep it, acks
// what it processed, gives failed jobs back with a reason, and watches the
// dead letter. Every ack, touch and release names the delivery it holds.
//
//     SUNDIAL_TOKEN=... node worker.mjs
//
// Node 18 or later (built-in fetch), no packages. See ../README.md for the
// variables and the output.

import { setTimeout as sleep } from "node:timers/promises";

const env = process.env;
const URL_BASE = (env.SUNDIAL_API_URL || "http://127.0.0.1:7777").replace(/\/+$/, "");
const TOKEN = env.SUNDIAL_TOKEN || "";
const NAMESPACE = env.SUNDIAL_NAMESPACE || "demo";
const QUEUE = env.SUNDIAL_QUEUE || "emails";
const TTR = Number(env.SUNDIAL_TTR || 30); // seconds to ack before a redelivery
const POLL = Number(env.SUNDIAL_POLL || 5); // long-poll timeout, seconds
const EXIT_AFTER = Number(env.SUNDIAL_EXIT_AFTER || 0); // 0: run until signalled
const EXIT_IDLE = Number(env.SUNDIAL_EXIT_IDLE || 0); // 0: wait for jobs forever

const BASE = `${URL_BASE}/api/${NAMESPACE}/${QUEUE}`;

// Sundial unreachable, or busy (503, 429, 5xx): back off and try again.
class Transient extends Error {}

// Signals: while we only wait (a long poll, a back-off), stop at once; while
// a job is being processed, let it finish and stop afterwards. A long poll cut
// short takes no job: Sundial gives back a job it had reserved for a client
// that went away (docs/API.md). If the job was already on its way, it comes
// back after its TTR like any unacked job.
const stop = new AbortController();
for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => stop.abort());

// Sends one request; returns { status, body } for 2xx, the empty consume
// (404) and the statuses in `allow`. A transient
// failure throws Transient; any other status (bad token, bad parameter...)
// ends the worker. With `interruptible`, a signal aborts the request.
async function call(method, url, interruptible = false, allow = []) {
  let resp, text;
  try {
    resp = await fetch(url, {
      method,
      headers: { "X-Token": TOKEN },
      signal: interruptible ? stop.signal : undefined,
    });
    text = await resp.text();
  } catch (err) {
    if (stop.signal.aborted && interruptible) throw err; // AbortError: stopping
    throw new Transient(`${method} ${url}: ${err.cause?.message || err.message}`);
  }
  if (resp.status === 429 || resp.status >= 500) {
    throw new Transient(`${method} ${url}: HTTP ${resp.status} ${text}`);
  }
  // A 404 is the empty consume ({"msg":"no job available"}) only; any other
  // (a wrong URL's {"error":"api not found"}) is an error like the rest.
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch { /* not JSON: an error below */ }
  if (resp.status >= 400 && !allow.includes(resp.status) && !(resp.status === 404 && body?.msg)) {
    console.error(`worker: ${method} ${url}: HTTP ${resp.status} ${text}`);
    process.exit(1);
  }
  return { status: resp.status, body };
}

const state = {
  acked: 0,
  dead: 0, // jobs seen arriving in the dead letter
  lastDead: null, // its size at the last look
  lastJob: Date.now(), // when the last job arrived (or we started)
};
const done = () => EXIT_AFTER > 0 && state.acked + state.dead >= EXIT_AFTER;
const summary = () => console.log(`summary acked=${state.acked} dead=${state.dead}`);

// Reads the dead letter's size and, when it grew, peeks it to show its oldest
// job.
async function watchDeadletter() {
  const { size } = (await call("GET", `${BASE}/deadletter/size`)).body;
  if (state.lastDead !== null && size > state.lastDead) {
    const { deadletter_head } = (await call("GET", `${BASE}/deadletter`)).body;
    console.log(`dead ${size} head=${deadletter_head}`);
    state.dead += size - state.lastDead;
  }
  state.lastDead = size;
}

// Long-polls for one job and processes it.
async function pollOnce() {
  // 200 with a job, or 404 {"msg":"no job available"} once POLL seconds pass.
  // A job handed out is ours for TTR seconds, and one try is spent.
  const query = new URLSearchParams({ timeout: POLL, ttr: TTR });
  const { status, body: job } = await call("GET", `${BASE}?${query}`, true);
  if (status === 404) return;
  state.lastJob = Date.now();

  // "Process" it. The body comes base64-encoded in `data`. `delivery`
  // numbers this hand-out of the job: our ack, touch and release name it, so
  // that they do nothing once the job is no longer ours.
  const jobUrl = `${BASE}/job/${job.job_id}`;
  const fence = `delivery=${job.delivery}`;
  let n = "?";
  let fail = true; // not a demo job: let it go to the dead letter
  let seconds = 0;
  try {
    const body = JSON.parse(Buffer.from(job.data, "base64").toString());
    if (typeof body?.n === "number") {
      [n, fail, seconds] = [body.n, Boolean(body.fail), Number(body.seconds) || 0];
    }
  } catch {}

  // A long job: work in steps, touching between them so that the job stays
  // ours past its TTR (a worker that dies loses it after one TTR).
  const end = Date.now() + seconds * 1000;
  while (Date.now() < end) {
    await sleep(Math.max(0, Math.min((TTR * 1000) / 3, end - Date.now())));
    const { status } = await call("POST", `${jobUrl}/touch?ttr=${TTR}&${fence}`, false, [404, 409]);
    if (status !== 200) {
      console.log(`lost ${job.job_id} n=${n}`);
      return;
    }
    console.log(`touched ${job.job_id} n=${n}`);
  }

  if (fail) {
    // Give it back with the reason, at once: it comes back while it has
    // tries left (remain_tries, after this delivery), then goes to the dead
    // letter, where the reason is shown.
    console.log(`failed ${job.job_id} n=${n} remain_tries=${job.remain_tries}`);
    const reason = encodeURIComponent("asked to fail");
    await call("POST", `${jobUrl}/release?reason=${reason}&${fence}`, false, [404, 409]);
    return;
  }

  // Ack = DELETE (204). 409: the job is no longer ours (our TTR ran out and it
  // went to another worker), so it will be processed again: work must be safe
  // to repeat. Should the ack fail, the job comes back after its TTR.
  const { status: acked } = await call("DELETE", `${jobUrl}?${fence}`, false, [404, 409]);
  if (acked !== 204) {
    console.log(`lost ${job.job_id} n=${n}`);
    return;
  }
  state.acked++;
  console.log(`acked ${job.job_id} n=${n}`);
}

async function main() {
  if (!TOKEN) {
    console.error("worker: set SUNDIAL_TOKEN (create one with the admin API, see README)");
    process.exit(1);
  }
  let backoff = 1;
  while (!stop.signal.aborted && !done()) {
    if (EXIT_IDLE && Date.now() - state.lastJob > EXIT_IDLE * 1000) {
      summary();
      console.error(`worker: no job for ${EXIT_IDLE} s, giving up`);
      process.exit(1);
    }
    try {
      await watchDeadletter();
      if (!done()) await pollOnce();
      backoff = 1;
    } catch (err) {
      if (stop.signal.aborted && err.name === "AbortError") break; // signalled while waiting
      if (!(err instanceof Transient)) throw err;
      console.error(`worker: ${err.message}; retrying in ${backoff} s`);
      try {
        await sleep(backoff * 1000, undefined, { signal: stop.signal });
      } catch {
        break; // signalled during the back-off
      }
      backoff = Math.min(backoff * 2, 10);
    }
  }
  summary();
}

await main();
