// Command worker is a Sundial worker: it long-polls a queue, touches a long
// job to keep it, acks what it processed, gives failed jobs back with a
// reason, and watches the dead letter. Every ack, touch and release names
// the delivery it holds.
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
// It returns the status for 2xx, for the empty consume (404
// {"msg":"no job available"}) and for those in allow, and an error only for
// a transient failure: Sundial unreachable, or busy (503, 429, 5xx), to
// retry after a back-off. Any other status (bad token, bad parameter, a
// wrong URL's 404 {"error": …}) ends the worker.
func call(ctx context.Context, method, u string, out any, allow ...int) (int, error) {
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
	case resp.StatusCode >= 400 && !noJob(resp.StatusCode, body) && !allowed(resp.StatusCode, allow):
		fatal("%s %s: HTTP %d %s", method, u, resp.StatusCode, body)
	case resp.StatusCode < 300 && out != nil:
		return resp.StatusCode, json.Unmarshal(body, out)
	}
	return resp.StatusCode, nil
}

// allowed tells whether status is one of allow.
func allowed(status int, allow []int) bool {
	for _, a := range allow {
		if a == status {
			return true
		}
	}
	return false
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
		Delivery    int    `json:"delivery"`     // this hand-out's number
	}
	status, err := call(ctx, "GET", queueURL+"?"+query.Encode(), &j)
	if err != nil || status == 404 {
		return err
	}
	w.lastJob = time.Now()

	// "Process" it. A body that is not a demo job goes to the dead letter.
	// The delivery number goes with our ack, touch and release, so that they
	// do nothing once the job is no longer ours. None is tied to ctx: a job
	// in hand is finished even if a signal came.
	var body struct {
		N       json.RawMessage `json:"n"`
		Fail    bool            `json:"fail"`
		Seconds float64         `json:"seconds"`
	}
	if json.Unmarshal(j.Data, &body) != nil || body.N == nil {
		body.N, body.Fail, body.Seconds = json.RawMessage("?"), true, 0
	}
	jobURL := queueURL + "/job/" + j.JobID
	fence := "delivery=" + strconv.Itoa(j.Delivery)
	bg := context.Background()

	// A long job: work in steps, touching between them so that the job stays
	// ours past its TTR (a worker that dies loses it after one TTR).
	end := time.Now().Add(time.Duration(body.Seconds * float64(time.Second)))
	for time.Now().Before(end) {
		step := time.Duration(ttr) * time.Second / 3
		if left := time.Until(end); left < step {
			step = left
		}
		time.Sleep(step)
		status, err := call(bg, "POST", fmt.Sprintf("%s/touch?ttr=%d&%s", jobURL, ttr, fence), nil, 404, 409)
		if err != nil {
			return err
		}
		if status != 200 {
			fmt.Printf("lost %s n=%s\n", j.JobID, body.N)
			return nil
		}
		fmt.Printf("touched %s n=%s\n", j.JobID, body.N)
	}

	if body.Fail {
		// Give it back with the reason, at once: it comes back while it has
		// tries left (remain_tries, after this delivery), then goes to the
		// dead letter, where the reason is shown.
		fmt.Printf("failed %s n=%s remain_tries=%d\n", j.JobID, body.N, j.RemainTries)
		reason := url.QueryEscape("asked to fail")
		_, err := call(bg, "POST", jobURL+"/release?reason="+reason+"&"+fence, nil, 404, 409)
		return err
	}

	// Ack = DELETE (204). 409: the job is no longer ours (our TTR ran out and
	// it went to another worker), so it will be processed again: work must
	// be safe to repeat. Should the ack fail, the job comes back after its TTR.
	status, err = call(bg, "DELETE", jobURL+"?"+fence, nil, 404, 409)
	if err != nil {
		return err
	}
	if status != 204 {
		fmt.Printf("lost %s n=%s\n", j.JobID, body.N)
		return nil
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
