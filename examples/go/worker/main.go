// Command worker is a Sundial (or lmstfy) worker: it long-polls a queue, acks
// what it processed, leaves failed jobs to come back after their TTR, and
// watches the dead letter.
//
//	SUNDIAL_TOKEN=... go run ./worker
//
// Standard library only. See ../README.md for the variables and the output.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func getenv(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func getint(key string, def int) int {
	v, err := strconv.Atoi(getenv(key, strconv.Itoa(def)))
	if err != nil {
		fatal("%s=%q is not a number", key, os.Getenv(key))
	}
	return v
}

func fatal(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "worker: "+format+"\n", args...)
	os.Exit(1)
}

var (
	base      = strings.TrimRight(getenv("SUNDIAL_API_URL", "http://127.0.0.1:7777"), "/")
	token     = os.Getenv("SUNDIAL_TOKEN")
	queueURL  = fmt.Sprintf("%s/api/%s/%s", base, getenv("SUNDIAL_NAMESPACE", "demo"), getenv("SUNDIAL_QUEUE", "emails"))
	ttr       = getint("SUNDIAL_TTR", 30)       // seconds to ack before a redelivery
	poll      = getint("SUNDIAL_POLL", 5)       // long-poll timeout, seconds
	exitAfter = getint("SUNDIAL_EXIT_AFTER", 0) // 0: run until signalled
	exitIdle  = getint("SUNDIAL_EXIT_IDLE", 0)  // 0: wait for jobs forever
	client    = &http.Client{Timeout: time.Duration(poll+30) * time.Second}
)

// call sends one request and decodes a 2xx answer into out (when not nil).
// It returns the status for 2xx and for the empty consume (404
// {"msg":"no job available"}), and an error only for a transient failure:
// Sundial unreachable, or busy (503, 429, 5xx), to retry after a back-off.
// Any other status (bad token, bad parameter, a wrong URL's 404 {"error":
// …}) ends the worker.
func call(ctx context.Context, method, u string, out any) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, method, u, nil)
	req.Header.Set("X-Token", token)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	switch {
	case err != nil:
		return 0, err
	case resp.StatusCode == 429 || resp.StatusCode >= 500:
		return 0, fmt.Errorf("%s %s: HTTP %d %s", method, u, resp.StatusCode, body)
	case resp.StatusCode >= 400 && !noJob(resp.StatusCode, body):
		fatal("%s %s: HTTP %d %s", method, u, resp.StatusCode, body)
	case resp.StatusCode < 300 && out != nil:
		return resp.StatusCode, json.Unmarshal(body, out)
	}
	return resp.StatusCode, nil
}

// noJob tells the empty consume (404 {"msg": …}) from other 404s, such as
// a wrong URL's {"error":"api not found"}.
func noJob(status int, body []byte) bool {
	var b struct {
		Msg string `json:"msg"`
	}
	return status == 404 && json.Unmarshal(body, &b) == nil && b.Msg != ""
}

type worker struct {
	acked, dead int       // dead: jobs seen arriving in the dead letter
	lastDead    int       // its size at the last look; -1 before the first
	lastJob     time.Time // when the last job arrived (or we started)
}

func (w *worker) done() bool { return exitAfter > 0 && w.acked+w.dead >= exitAfter }

// watchDeadletter reads the dead letter's size and, when it grew, peeks it
// to show its oldest job.
func (w *worker) watchDeadletter() error {
	var dl struct {
		Size int    `json:"size"`            // from GET …/deadletter/size
		Head string `json:"deadletter_head"` // from the peek, GET …/deadletter
	}
	if _, err := call(context.Background(), "GET", queueURL+"/deadletter/size", &dl); err != nil {
		return err
	}
	if w.lastDead >= 0 && dl.Size > w.lastDead {
		if _, err := call(context.Background(), "GET", queueURL+"/deadletter", &dl); err != nil {
			return err
		}
		fmt.Printf("dead %d head=%s\n", dl.Size, dl.Head)
		w.dead += dl.Size - w.lastDead
	}
	w.lastDead = dl.Size
	return nil
}

// pollOnce long-polls for one job and processes it. ctx ends the wait.
func (w *worker) pollOnce(ctx context.Context) error {
	// 200 with a job, or 404 {"msg":"no job available"} once poll seconds
	// pass. A job handed out is ours for ttr seconds, and one try is spent.
	query := url.Values{"timeout": {strconv.Itoa(poll)}, "ttr": {strconv.Itoa(ttr)}}
	var j struct { // the job object, docs/API.md
		JobID       string `json:"job_id"`
		Data        []byte `json:"data"`         // the body: base64 in JSON, decoded by encoding/json
		RemainTries int    `json:"remain_tries"` // deliveries left after this one
	}
	status, err := call(ctx, "GET", queueURL+"?"+query.Encode(), &j)
	if err != nil || status == 404 {
		return err
	}
	w.lastJob = time.Now()

	// "Process" it. A body that is not a demo job goes to the dead letter.
	var body struct {
		N    json.RawMessage `json:"n"`
		Fail bool            `json:"fail"`
	}
	if json.Unmarshal(j.Data, &body) != nil || body.N == nil {
		body.N, body.Fail = json.RawMessage("?"), true
	}

	if body.Fail {
		// No ack: the job comes back after its TTR while it has tries left
		// (remain_tries, after this delivery), then goes to the dead letter.
		fmt.Printf("failed %s n=%s remain_tries=%d\n", j.JobID, body.N, j.RemainTries)
		return nil
	}

	// Ack = DELETE (204), not tied to ctx: a job in hand is finished even if
	// a signal came. Should the ack fail, the job comes back after its TTR and
	// is processed again: work must be safe to repeat.
	if _, err := call(context.Background(), "DELETE", queueURL+"/job/"+j.JobID, nil); err != nil {
		return err
	}
	w.acked++
	fmt.Printf("acked %s n=%s\n", j.JobID, body.N)
	return nil
}

func main() {
	if token == "" {
		fatal("set SUNDIAL_TOKEN (create one with the admin API, see README)")
	}
	// Signals: while we only wait (a long poll, a back-off), stop at once;
	// while a job is being processed, let it finish and stop afterwards. A
	// long poll cut short takes no job: Sundial gives back a job it had
	// reserved for a client that went away (docs/API.md). If the job was
	// already on its way, it comes back after its TTR like any unacked job.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	w := &worker{lastDead: -1, lastJob: time.Now()}
	backoff := time.Second
	for ctx.Err() == nil && !w.done() {
		if exitIdle > 0 && time.Since(w.lastJob) > time.Duration(exitIdle)*time.Second {
			fmt.Printf("summary acked=%d dead=%d\n", w.acked, w.dead)
			fatal("no job for %d s, giving up", exitIdle)
		}
		err := w.watchDeadletter()
		if err == nil && !w.done() {
			err = w.pollOnce(ctx)
		}
		if err == nil {
			backoff = time.Second
			continue
		}
		if ctx.Err() != nil {
			break // signalled while waiting
		}
		fmt.Fprintf(os.Stderr, "worker: %v; retrying in %v\n", err, backoff)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		if backoff *= 2; backoff > 10*time.Second {
			backoff = 10 * time.Second
		}
	}
	fmt.Printf("summary acked=%d dead=%d\n", w.acked, w.dead)
}
