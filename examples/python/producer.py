#!/usr/bin/env python3
"""Publishes COUNT demo jobs to a Sundial (or lmstfy) queue.

    SUNDIAL_TOKEN=... python3 producer.py [COUNT]

Each job's body is a small JSON document, {"n": i, "fail": bool,
"seconds": s}; every fifth job (n = 5, 10, ...) asks the worker to fail, so
it shows retries and the dead letter, and every seventh takes two seconds of
work, so it shows a worker touching a long job. Standard library only. See ../README.md for the variables.
"""

import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request

URL = os.environ.get("SUNDIAL_API_URL", "http://127.0.0.1:7777").rstrip("/")
TOKEN = os.environ.get("SUNDIAL_TOKEN", "")
NAMESPACE = os.environ.get("SUNDIAL_NAMESPACE", "demo")
QUEUE = os.environ.get("SUNDIAL_QUEUE", "emails")
DELAY = os.environ.get("SUNDIAL_DELAY", "0")  # seconds before a job is ready

TRIES = 2  # deliveries before the dead letter: the first one and one retry
TTL = 3600  # seconds a job lives in any state, the dead letter included


def publish(body):
    """PUT /api/{ns}/{queue}: returns the new job's id.

    Raises urllib.error.HTTPError on an error status (its body is the JSON
    error) and urllib.error.URLError when Sundial cannot be reached.
    """
    query = urllib.parse.urlencode({"delay": DELAY, "ttl": TTL, "tries": TRIES})
    req = urllib.request.Request(
        f"{URL}/api/{NAMESPACE}/{QUEUE}?{query}",
        data=json.dumps(body).encode(),
        method="PUT",
        headers={"X-Token": TOKEN, "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:  # 201 Created
        return json.load(resp)["job_id"]


def main():
    if not TOKEN:
        sys.exit("producer: set SUNDIAL_TOKEN (create one with the admin API, see README)")
    try:
        count = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    except ValueError:
        sys.exit(f"usage: producer.py [COUNT]  (not a number: {sys.argv[1]!r})")

    for n in range(1, count + 1):
        # Every seventh job takes two seconds of work (the worker touches it).
        body = {"n": n, "fail": n % 5 == 0, "seconds": 2 if n % 7 == 0 else 0}
        try:
            job_id = publish(body)
        except urllib.error.HTTPError as e:
            # Sundial answers errors as JSON, e.g. 401 {"error":"invalid token"}.
            detail = e.read().decode(errors="replace").strip()
            sys.exit(f"producer: publish n={n} failed: HTTP {e.code} {detail}")
        except (urllib.error.URLError, OSError) as e:
            # No automatic retry here: if the request reached Sundial and only
            # the answer was lost, publishing again would make a duplicate job.
            sys.exit(f"producer: publish n={n} failed: {e}")
        print(f"published {job_id} n={n}", flush=True)


if __name__ == "__main__":
    main()
