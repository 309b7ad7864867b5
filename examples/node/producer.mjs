// Publishes COUNT demo jobs to a Sundial (or lmstfy) queue.
//
//     SUNDIAL_TOKEN=... node producer.mjs [COUNT]
//
// Each job's body is a small JSON document, {"n": i, "fail": bool,
// "seconds": s}; every seventh job takes two seconds of work, so it shows a
// worker touching a long job, and every
// fifth job (n = 5, 10, ...) asks the worker to fail, so it shows retries and
// the dead letter. Node 18 or later (built-in fetch), no packages. See
// ../README.md for the variables.

const env = process.env;
const URL_BASE = (env.SUNDIAL_API_URL || "http://127.0.0.1:7777").replace(/\/+$/, "");
const TOKEN = env.SUNDIAL_TOKEN || "";
const NAMESPACE = env.SUNDIAL_NAMESPACE || "demo";
const QUEUE = env.SUNDIAL_QUEUE || "emails";
const DELAY = env.SUNDIAL_DELAY || "0"; // seconds before a job is ready

const TRIES = 2; // deliveries before the dead letter: the first one and one retry
const TTL = 3600; // seconds a job lives in any state, the dead letter included

function fail(message) {
  console.error(`producer: ${message}`);
  process.exit(1);
}

// PUT /api/{ns}/{queue}: returns the new job's id. Throws on a network error;
// an error status comes back as { status, text }.
async function publish(body) {
  const query = new URLSearchParams({ delay: DELAY, ttl: TTL, tries: TRIES });
  const resp = await fetch(`${URL_BASE}/api/${NAMESPACE}/${QUEUE}?${query}`, {
    method: "PUT",
    headers: { "X-Token": TOKEN, "Content-Type": "application/json" },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(30_000),
  });
  const text = await resp.text();
  if (resp.status !== 201) return { status: resp.status, text };
  return { jobId: JSON.parse(text).job_id };
}

async function main() {
  if (!TOKEN) fail("set SUNDIAL_TOKEN (create one with the admin API, see README)");
  const count = process.argv[2] === undefined ? 10 : Number(process.argv[2]);
  if (!Number.isInteger(count) || count < 0) {
    fail(`usage: producer.mjs [COUNT]  (not a number: ${JSON.stringify(process.argv[2])})`);
  }

  for (let n = 1; n <= count; n++) {
    let result;
    try {
      result = await publish({ n, fail: n % 5 === 0, seconds: n % 7 === 0 ? 2 : 0 });
    } catch (err) {
      // No automatic retry here: if the request reached Sundial and only the
      // answer was lost, publishing again would make a duplicate job.
      fail(`publish n=${n} failed: ${err.cause?.message || err.message}`);
    }
    if (result.status) {
      // Sundial answers errors as JSON, e.g. 401 {"error":"invalid token"}.
      fail(`publish n=${n} failed: HTTP ${result.status} ${result.text.trim()}`);
    }
    console.log(`published ${result.jobId} n=${n}`);
  }
}

await main();
