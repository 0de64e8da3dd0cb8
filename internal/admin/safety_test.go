package admin

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
)

// send makes a request with extra headers (and Host, when given).
func (e *env) send(t *testing.T, method, path, host string, headers ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, e.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	if e.token != "" && req.Header.Get("Authorization") == "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return reply{status: res.StatusCode, header: res.Header, body: b}
}

// DNS rebinding: a page whose own name was pointed at this server sends
// that name as Host. Only loopback names, IP literals (no rebinding
// without a name) and http.allowed_hosts are served.
func TestHostAllowList(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{AllowedHosts: []string{"Switchyard.Internal"}})
	port := strings.TrimPrefix(e.url[strings.LastIndex(e.url, ":"):], ":")
	for _, c := range []struct {
		host string
		ok   bool
	}{
		{"127.0.0.1:" + port, true},
		{"localhost:" + port, true},
		{"LOCALHOST", true},
		{"app.localhost:" + port, true},
		{"[::1]:" + port, true},
		{"10.1.2.3:8080", true},
		{"switchyard.internal:8080", true},
		{"SWITCHYARD.internal.", true},
		{"evil.example:" + port, false},
		{"localhost.evil.example", false},
		{"internal", false},
	} {
		for _, path := range []string{"/", "/v1/queues", "/healthz"} {
			r := e.send(t, "GET", path, c.host)
			if c.ok && r.status == http.StatusMisdirectedRequest || !c.ok && r.status != http.StatusMisdirectedRequest {
				t.Errorf("Host %q %s: status %d (%s), want served=%v", c.host, path, r.status, r.body, c.ok)
			}
			if !c.ok {
				wantError(t, r, http.StatusMisdirectedRequest, "Host")
			}
		}
	}
}

// CSRF: a state-changing request that a browser sent for a page of
// another origin is refused, with a token or without one; reads, and
// requests that no browser made, are not.
func TestCrossOriginActionsRefused(t *testing.T) {
	t.Parallel()
	for _, token := range []string{"", "s3cret"} {
		t.Run("token="+token, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, Config{Token: token})
			seed(t, e.store, []pgstore.NewJob{newJob("interactive", "c", 1)}, nil)
			self := strings.TrimPrefix(e.url, "http://")
			for _, c := range []struct {
				name    string
				headers []string
				by      string // the header the refusal names; "": not refused
			}{
				{"form post from another site", []string{"Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site"}, "Sec-Fetch-Site"},
				{"another port of localhost", []string{"Origin", "http://127.0.0.1:1", "Sec-Fetch-Site", "same-site"}, "Sec-Fetch-Site"},
				{"an old browser's Origin alone", []string{"Origin", "http://evil.example"}, "Origin"},
				{"a sandboxed page", []string{"Origin", "null"}, "Origin"},
				{"fetch metadata alone", []string{"Sec-Fetch-Site", "cross-site"}, "Sec-Fetch-Site"},
				{"this server's own page", []string{"Origin", "http://" + self, "Sec-Fetch-Site", "same-origin"}, ""},
				{"typed into the address bar", []string{"Sec-Fetch-Site", "none"}, ""},
			} {
				r := e.send(t, "POST", "/v1/jobs/999/cancel", "", c.headers...)
				if c.by != "" {
					wantError(t, r, http.StatusForbidden, c.by)
				} else if r.status != http.StatusNotFound {
					t.Errorf("%s: status %d, want the handler's 404", c.name, r.status)
				}
				// Reads cross origins freely: the browser keeps the answer
				// from the page (no CORS headers are ever sent).
				if r := e.send(t, "GET", "/v1/jobs/1", "", c.headers...); r.status != http.StatusOK {
					t.Errorf("%s: GET status %d", c.name, r.status)
				}
			}
			r := e.send(t, "POST", "/v1/jobs/1/cancel", "", "Origin", "http://evil.example")
			wantError(t, r, http.StatusForbidden, "Origin")
			if job, err := e.store.JobGet(context.Background(), 1); err != nil || job.State != "queued" {
				t.Fatalf("job after a refused cross-origin cancel: %+v %v", job, err)
			}
			// A client that is not a browser (curl, the CLI) sends neither.
			e.send(t, "POST", "/v1/jobs/1/cancel", "").must(t, http.StatusOK)
		})
	}
}

// Every error is the JSON error shape, 431 included: the guard answers
// oversized headers before net/http's plain-text answer would.
func TestOversizedHeadersAreJSON(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	r := e.send(t, "GET", "/v1/queues", "", "X-Big", strings.Repeat("a", maxHeaderBytes))
	wantError(t, r, http.StatusRequestHeaderFieldsTooLarge, "")
}

// Unknown query parameters are refused on every endpoint, so that a
// typo never reads as an answer.
func TestUnknownQueryParametersRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	for _, c := range []struct{ method, path, field string }{
		{"GET", "/v1/jobs?stat=dead", "stat"}, {"GET", "/v1/jobs/1?verbose=1", "verbose"},
		{"POST", "/v1/jobs/1/cancel?force=1", "force"}, {"GET", "/v1/dlq?stat=dead", "stat"},
		{"GET", "/v1/dlq/1?x=1", "x"}, {"POST", "/v1/dlq/1/redrive?x=1", "x"}, {"POST", "/v1/dlq/1/discard?x=1", "x"},
		{"GET", "/v1/queues?x=1", "x"}, {"GET", "/v1/openapi.json?x=1", "x"},
		{"POST", "/v1/queues/q/jobs?kind=k&x=1", "x"}, {"GET", "/readyz?x=1", "x"}, {"GET", "/healthz?x=1", "x"},
	} {
		body := wantError(t, e.send(t, c.method, c.path, ""), http.StatusBadRequest, c.field)
		if !strings.Contains(body.Error, "unknown query parameter") {
			t.Errorf("%s %s: %q", c.method, c.path, body.Error)
		}
	}
	wantError(t, e.send(t, "GET", "/v1/jobs?state=dead&state=queued", ""), http.StatusBadRequest, "state")
	e.send(t, "GET", "/v1/jobs?route=orders&limit=5", "").must(t, http.StatusOK)
}

// proxy forwards TCP to addr until closed, so that a test can make a real
// Postgres unreachable from one store without touching the server.
type proxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newProxy(t *testing.T, addr string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	t.Cleanup(p.close)
	return p
}

// close stops accepting and drops every connection: Postgres is gone.
func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// While Postgres cannot be reached, the API answers 503 with Retry-After
// (the client did nothing wrong), never a 500, and says no more.
func TestPostgresUnreachableIs503(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(dbURL(t))
	if err != nil {
		t.Fatal(err)
	}
	px := newProxy(t, u.Host)
	u.Host = px.ln.Addr().String()
	schema := "t_admin_" + randomHex(t)
	st, err := pgstore.Open(context.Background(), pgstore.Config{URL: u.String(), Schema: schema, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if _, err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Through a store of its own: this one's Postgres is "gone".
		direct, err := pgstore.Open(context.Background(), pgstore.Config{URL: dbURL(t), Schema: schema, MaxConns: 2})
		if err == nil {
			_ = direct.DropSchema(context.Background())
			direct.Close()
		}
	})
	e := serve(t, Config{}, st, zaptest.NewLogger(t))
	e.get(t, "/v1/queues").must(t, http.StatusOK)
	px.close()
	for _, path := range []string{"/v1/jobs", "/v1/jobs/1", "/v1/dlq", "/v1/queues"} {
		r := e.get(t, path)
		got := wantError(t, r, http.StatusServiceUnavailable, "")
		if r.header.Get("Retry-After") == "" || strings.Contains(got.Error, "127.0.0.1") {
			t.Errorf("%s: Retry-After %q, error %q", path, r.header.Get("Retry-After"), got.Error)
		}
	}
	wantError(t, e.send(t, "POST", "/v1/jobs/1/cancel", ""), http.StatusServiceUnavailable, "")
}

// /readyz answers from a result at most a second old: a flood of probes
// runs the checks about once a second, and all of them are answered.
func TestReadyzIsCached(t *testing.T) {
	t.Parallel()
	var checks atomic.Int32
	e := newEnv(t, Config{Ready: func(context.Context) error {
		checks.Add(1)
		return nil
	}})
	began := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int32
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := http.Get(e.url + "/readyz")
			if err != nil || res.StatusCode != http.StatusOK {
				failed.Add(1)
			}
			if err == nil {
				res.Body.Close()
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d of 200 probes failed", n)
	}
	if n, most := checks.Load(), int32(time.Since(began)/readyTTL)+1; n > most {
		t.Fatalf("200 probes ran the checks %d times in %s, want at most %d", n, time.Since(began), most)
	}
}

// A page of DLQ entries costs bounded memory whatever the entries hold:
// lists carry no payloads (only GET /v1/dlq/{id} does). Before, four
// concurrent 500-entry pages of 8 MB records took a process to 3.1 GB.
// Not parallel: it measures this process's allocations.
func TestDLQListMemoryIsBounded(t *testing.T) {
	e := newEnv(t, Config{})
	const entries, size = 100, 1 << 20
	if _, err := e.store.Pool().Exec(context.Background(), `
		INSERT INTO dlq_entries (reason, route, queue, src_topic, src_partition, src_offset, last_error, payload)
		SELECT 'decode', 'orders', 'interactive', 'orders', 0, g, 'not JSON',
			convert_to(repeat(md5(g::text), $1 / 32), 'UTF8')
		FROM generate_series(1, $2) g`, size, entries); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := http.Get(e.url + "/v1/dlq?limit=500")
			if err != nil {
				t.Error(err)
				return
			}
			defer res.Body.Close()
			n, _ := io.Copy(io.Discard, res.Body)
			if res.StatusCode != http.StatusOK || n > 100<<10 {
				t.Errorf("status %d, %d bytes for %d entries", res.StatusCode, n, entries)
			}
		}()
	}
	wg.Wait()
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
		t.Fatalf("four pages of %d entries of %d bytes allocated %d MiB", entries, size, alloc>>20)
	}
	// The detail still has the whole record.
	r := e.get(t, "/v1/dlq/1").must(t, http.StatusOK)
	if got := decode[pgstore.DLQEntry](t, r); len(got.Payload) != size {
		t.Fatalf("entry 1 payload %d bytes, want %d", len(got.Payload), size)
	}
}
