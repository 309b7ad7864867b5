#!/usr/bin/env python3
"""A Sundial worker: long-polls a queue, touches a long job to keep it,
acks what it processed, gives failed jobs back with a reason, and watches
the dead letter. Every ack, touch and release names the delivery it holds.

    SUNDIAL_TOKEN=... python3 worker.py

Standard library only. See ../README.md for the variables and the output.
"""

import base64
import json
import os
import signal
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

URL = os.environ.get("SUNDIAL_API_URL", "http://127.0.0.1:7777").rstrip("/")
TOKEN = os.environ.get("SUNDIAL_TOKEN", "")
NAMESPACE = os.environ.get("SUNDIAL_NAMESPACE", "demo")
QUEUE = os.environ.get("SUNDIAL_QUEUE", "emails")
TTR = int(os.environ.get("SUNDIAL_TTR", "30"))  # seconds to ack before a redelivery
POLL = int(os.environ.get("SUNDIAL_POLL", "5"))  # long-poll timeout, seconds
EXIT_AFTER = int(os.environ.get("SUNDIAL_EXIT_AFTER", "0"))  # 0: run until signalled
EXIT_IDLE = int(os.environ.get("SUNDIAL_EXIT_IDLE", "0"))  # 0: wait for jobs forever

BASE = f"{URL}/api/{NAMESPACE}/{QUEUE}"


class Transient(Exception):
    """Sundial unreachable, or busy (503, 429, 5xx): back off and try again."""


class Stop(Exception):
    """SIGINT or SIGTERM arrived while we were only waiting."""


def call(method, url, allow=()):
    """Sends one request; returns (status, parsed JSON body or None).

    Only 2xx, the empty consume (404) and the statuses in `allow` come back; a transient
    failure raises Transient, and any other status (bad token, bad parameter...) ends the
    worker.
    """
    req = urllib.request.Request(url, method=method, headers={"X-Token": TOKEN})
    try:
        with urllib.request.urlopen(req, timeout=POLL + 30) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    except (urllib.error.URLError, OSError) as e:
        raise Transient(f"{method} {url}: {e}") from e
    if status == 429 or status >= 500:
        raise Transient(f"{method} {url}: HTTP {status} {raw.decode(errors='replace')}")
    # A 404 is the empty consume ({"msg": "no job available"}) only; any
    # other (a wrong URL's {"error": "api not found"}) is an error like the rest.
    if status >= 400 and status not in allow and not (status == 404 and b'"msg"' in raw):
        sys.exit(f"worker: {method} {url}: HTTP {status} {raw.decode(errors='replace')}")
    return status, (json.loads(raw) if raw else None)


# Signals: while we only wait (a long poll, a back-off), stop at once; while a
# job is being processed, let it finish and stop afterwards. A long poll cut
# short takes no job: Sundial gives back a job it had reserved for a client
# that went away (docs/API.md). If the job was already on its way, it comes
# back after its TTR like any unacked job.
stopping = False
waiting = False


def on_signal(signum, frame):
    global stopping
    stopping = True
    if waiting:
        raise Stop()


def wait(fn, *args):
    """Runs fn(*args) as a wait that a signal may cut short (raising Stop)."""
    global waiting
    if stopping:  # the signal came while we were busy: do not start waiting
        raise Stop()
    waiting = True
    try:
        return fn(*args)
    finally:
        waiting = False


class Worker:
    def __init__(self):
        self.acked = 0
        self.dead = 0  # jobs seen arriving in the dead letter
        self.last_dead = None  # its size at the last look
        self.last_job = time.monotonic()  # when the last job arrived (or we started)

    def done(self):
        return EXIT_AFTER > 0 and self.acked + self.dead >= EXIT_AFTER

    def watch_deadletter(self):
        """Reads the dead letter's size and, when it grew, peeks it to show
        its oldest job."""
        size = call("GET", f"{BASE}/deadletter/size")[1]["size"]
        if self.last_dead is not None and size > self.last_dead:
            head = call("GET", f"{BASE}/deadletter")[1]["deadletter_head"]
            print(f"dead {size} head={head}", flush=True)
            self.dead += size - self.last_dead
        self.last_dead = size

    def poll_once(self):
        """Long-polls for one job and processes it."""
        # 200 with a job, or 404 {"msg":"no job available"} once POLL seconds
        # pass. A job handed out is ours for TTR seconds, and one try is spent.
        query = urllib.parse.urlencode({"timeout": POLL, "ttr": TTR})
        status, job = wait(call, "GET", f"{BASE}?{query}")
        if status == 404:
            return
        self.last_job = time.monotonic()

        # "Process" it. The body comes base64-encoded in `data`. `delivery`
        # numbers this hand-out of the job: our ack, touch and release name
        # it, so that they do nothing once the job is no longer ours.
        job_url = f"{BASE}/job/{job['job_id']}"
        fence = f"delivery={job['delivery']}"
        try:
            body = json.loads(base64.b64decode(job["data"]))
            n, fail, seconds = body["n"], bool(body["fail"]), float(body.get("seconds", 0))
        except (ValueError, KeyError, TypeError):
            n, fail, seconds = "?", True, 0  # not a demo job: let it go to the dead letter

        # A long job: work in steps, touching between them so that the job
        # stays ours past its TTR (a worker that dies loses it after one TTR).
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(max(0, min(TTR / 3, end - time.monotonic())))
            status, _ = call("POST", f"{job_url}/touch?ttr={TTR}&{fence}", allow=(404, 409))
            if status != 200:
                print(f"lost {job['job_id']} n={n}", flush=True)
                return
            print(f"touched {job['job_id']} n={n}", flush=True)

        if fail:
            # Give it back with the reason, at once: it comes back while it
            # has tries left (remain_tries, after this delivery), then goes to
            # the dead letter, where the reason is shown.
            print(f"failed {job['job_id']} n={n} remain_tries={job['remain_tries']}", flush=True)
            reason = urllib.parse.quote("asked to fail")
            call("POST", f"{job_url}/release?reason={reason}&{fence}", allow=(404, 409))
            return

        # Ack = DELETE (204). 409: the job is no longer ours (our TTR ran out and
        # it went to another worker), so it will be processed again: work must
        # be safe to repeat. Should the ack fail, the job comes back after its TTR.
        status, _ = call("DELETE", f"{job_url}?{fence}", allow=(404, 409))
        if status != 204:
            print(f"lost {job['job_id']} n={n}", flush=True)
            return
        self.acked += 1
        print(f"acked {job['job_id']} n={n}", flush=True)

    def run(self):
        backoff = 1
        while not stopping and not self.done():
            if EXIT_IDLE and time.monotonic() - self.last_job > EXIT_IDLE:
                print(f"summary acked={self.acked} dead={self.dead}", flush=True)
                sys.exit(f"worker: no job for {EXIT_IDLE} s, giving up")
            try:
                self.watch_deadletter()
                if not self.done():
                    self.poll_once()
                backoff = 1
            except Transient as e:
                print(f"worker: {e}; retrying in {backoff} s", file=sys.stderr, flush=True)
                wait(time.sleep, backoff)
                backoff = min(backoff * 2, 10)


def main():
    if not TOKEN:
        sys.exit("worker: set SUNDIAL_TOKEN (create one with the admin API, see README)")
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    worker = Worker()
    try:
        worker.run()
    except Stop:
        pass  # signalled during a wait: no job in hand
    print(f"summary acked={worker.acked} dead={worker.dead}", flush=True)


if __name__ == "__main__":
    main()
