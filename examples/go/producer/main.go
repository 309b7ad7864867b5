// Command producer publishes COUNT demo jobs to a Sundial (or lmstfy) queue.
//
//	SUNDIAL_TOKEN=... go run ./producer [COUNT]
//
// Each job's body is a small JSON document, {"n": i, "fail": bool,
// "seconds": s}; every fifth job (n = 5, 10, ...) asks the worker to fail, so
// it shows retries and the dead letter, and every seventh takes two seconds
// of work, so it shows a worker touching a long job. Standard library only. See ../README.md for the variables.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

const (
	tries = 2    // deliveries before the dead letter: the first one and one retry
	ttl   = 3600 // seconds a job lives in any state, the dead letter included
)

func getenv(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "producer: "+format+"\n", args...)
	os.Exit(1)
}

type job struct {
	N       int     `json:"n"`
	Fail    bool    `json:"fail"`
	Seconds float64 `json:"seconds"`
}

func main() {
	base := strings.TrimRight(getenv("SUNDIAL_API_URL", "http://127.0.0.1:7777"), "/")
	token := os.Getenv("SUNDIAL_TOKEN")
	ns := getenv("SUNDIAL_NAMESPACE", "demo")
	queue := getenv("SUNDIAL_QUEUE", "emails")
	delay := getenv("SUNDIAL_DELAY", "0") // seconds before a job is ready
	if token == "" {
		fail("set SUNDIAL_TOKEN (create one with the admin API, see README)")
	}
	count := 10
	if len(os.Args) > 1 {
		var err error
		if count, err = strconv.Atoi(os.Args[1]); err != nil || count < 0 {
			fail("usage: producer [COUNT]  (not a number: %q)", os.Args[1])
		}
	}

	query := url.Values{
		"delay": {delay},
		"ttl":   {strconv.Itoa(ttl)},
		"tries": {strconv.Itoa(tries)},
	}
	endpoint := fmt.Sprintf("%s/api/%s/%s?%s", base, ns, queue, query.Encode())
	client := &http.Client{Timeout: 30 * time.Second}

	for n := 1; n <= count; n++ {
		seconds := 0.0
		if n%7 == 0 {
			seconds = 2 // every seventh job is a long one
		}
		body, _ := json.Marshal(job{N: n, Fail: n%5 == 0, Seconds: seconds})
		req, err := http.NewRequest(http.MethodPut, endpoint, bytes.NewReader(body))
		if err != nil {
			fail("%v", err)
		}
		req.Header.Set("X-Token", token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			// No automatic retry here: if the request reached Sundial and only
			// the answer was lost, publishing again would make a duplicate job.
			fail("publish n=%d failed: %v", n, err)
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			// Sundial answers errors as JSON, e.g. 401 {"error":"invalid token"}.
			fail("publish n=%d failed: HTTP %d %s", n, resp.StatusCode, bytes.TrimSpace(answer))
		}
		var published struct {
			JobID string `json:"job_id"`
		}
		if err := json.Unmarshal(answer, &published); err != nil {
			fail("publish n=%d: unexpected answer %s", n, answer)
		}
		fmt.Printf("published %s n=%d\n", published.JobID, n)
	}
}
