package admin

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"go.uber.org/zap/zaptest"

	"github.com/switchyard-dev/switchyard/internal/dlq"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// seen is one request the admin server answered, as the browser sent it.
type seen struct {
	method, path, host, origin, site string
	status                           int
}

// watched serves the admin API without a token (the loopback default)
// and records every request and its answer.
type watched struct {
	store *pgstore.Store
	srv   *httptest.Server
	mu    sync.Mutex
	reqs  []seen
}

func newWatched(t *testing.T) *watched {
	t.Helper()
	st := newStore(t, true)
	w := &watched{store: st}
	h := New(Config{DLQ: dlq.New(st, nil, nil)}, st, zaptest.NewLogger(t)).Handler()
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rec := &statusWriter{ResponseWriter: rw, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		w.mu.Lock()
		w.reqs = append(w.reqs, seen{r.Method, r.URL.Path, r.Host, r.Header.Get("Origin"), r.Header.Get("Sec-Fetch-Site"), rec.status})
		w.mu.Unlock()
	}))
	t.Cleanup(w.srv.Close)
	return w
}

func (w *watched) requests(method, path string) []seen {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []seen
	for _, r := range w.reqs {
		if r.method == method && r.path == path {
			out = append(out, r)
		}
	}
	return out
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) { s.status = code; s.ResponseWriter.WriteHeader(code) }

// seedJobAndEntry makes job 1 (queued) and DLQ entry 1 (job 2, dead).
func seedJobAndEntry(t *testing.T, st *pgstore.Store) {
	t.Helper()
	seed(t, st, []pgstore.NewJob{newJob("interactive", "a", 1), newJob("bulk", "b", 2)}, nil)
	kill(t, st, claim(t, st, "bulk", 1)[0])
}

func jobState(t *testing.T, st *pgstore.Store, id int64) string {
	t.Helper()
	j, err := st.JobGet(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return string(j.State)
}

// CSRF in a real browser: a page on another origin auto-submits a form
// that would cancel a job and sends a no-cors fetch that would re-drive a
// DLQ entry. Both reach the server and change nothing. The same actions
// from the server's own origin work, so the test can tell the two apart.
func TestBrowserCrossOriginPageChangesNothing(t *testing.T) {
	t.Parallel()
	w := newWatched(t)
	seedJobAndEntry(t, w.store)
	evil := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(rw, `<!doctype html><title>evil</title>
<form id="f" method="POST" action="%[1]s/v1/jobs/1/cancel"><input name="x" value="1"></form>
<script>
fetch(%[1]q + "/v1/dlq/1/redrive", {method: "POST", mode: "no-cors", body: "{}"})
  .catch(() => {})
  .finally(() => { document.title = "fetched"; document.getElementById("f").submit(); });
</script>`, w.srv.URL)
	}))
	defer evil.Close()

	ctx := testenv.Browser(t)
	c, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(c, chromedp.Navigate(evil.URL)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the page's form post and fetch to reach the server", func() bool {
		return len(w.requests("POST", "/v1/jobs/1/cancel")) > 0 && len(w.requests("POST", "/v1/dlq/1/redrive")) > 0
	})
	for _, path := range []string{"/v1/jobs/1/cancel", "/v1/dlq/1/redrive"} {
		for _, r := range w.requests("POST", path) {
			if r.status != http.StatusForbidden {
				t.Errorf("%s from %s (Sec-Fetch-Site %q): status %d, want 403", path, r.origin, r.site, r.status)
			}
		}
	}
	if s := jobState(t, w.store, 1); s != "queued" {
		t.Errorf("job 1 is %s after the cross-origin form post", s)
	}
	if s := jobState(t, w.store, 2); s != "dead" {
		t.Errorf("job 2 is %s after the cross-origin re-drive", s)
	}

	// The control: the server's own page may act.
	if err := chromedp.Do(c, chromedp.Navigate(w.srv.URL+"/")); err != nil {
		t.Fatal(err)
	}
	status, err := chromedp.Run(c, chromedp.Evaluate[int](`fetch("/v1/jobs/1/cancel", {method: "POST"}).then(r => r.status)`,
		chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	if status != http.StatusOK || jobState(t, w.store, 1) != "cancelled" {
		t.Fatalf("a same-origin cancel: status %d, job %s; want 200 and cancelled", status, jobState(t, w.store, 1))
	}
}

// DNS rebinding in a real browser: a name the attacker controls, pointed
// at 127.0.0.1 (here by the browser's resolver rules), reaches the port
// with its own name as Host, and is answered 421 with no data, for the
// API and the dashboard alike.
func TestBrowserRebindingIsRefused(t *testing.T) {
	t.Parallel()
	w := newWatched(t)
	seedJobAndEntry(t, w.store)
	port := w.srv.URL[strings.LastIndex(w.srv.URL, ":")+1:]
	ctx := testenv.Browser(t, chromedp.Flag("host-resolver-rules", "MAP rebind.example 127.0.0.1"))
	for _, path := range []string{"/v1/jobs/1", "/"} {
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := chromedp.Do(c, chromedp.Navigate("http://rebind.example:"+port+path))
		var body string
		if err == nil {
			body, err = chromedp.Run(c, chromedp.Text(chromedp.CSS("body")))
		}
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		got := w.requests("GET", path)
		if len(got) == 0 || got[len(got)-1].host != "rebind.example:"+port || got[len(got)-1].status != http.StatusMisdirectedRequest {
			t.Fatalf("%s via rebind.example: requests %+v, want one answered 421", path, got)
		}
		if strings.Contains(body, "orders") || !strings.Contains(body, "allowed_hosts") {
			t.Errorf("%s via rebind.example showed %q", path, body)
		}
	}
}
