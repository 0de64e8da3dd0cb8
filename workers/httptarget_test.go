package workers

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// waitTimeout bounds every wait on a server-side signal, so a broken
// handler fails the test instead of hanging it.
const waitTimeout = 10 * time.Second

func newTestTarget(t *testing.T, cfg HTTPTargetConfig) *HTTPTarget {
	t.Helper()
	target, err := NewHTTPTarget(cfg)
	if err != nil {
		t.Fatalf("NewHTTPTarget: %v", err)
	}
	return target
}

// received is what a test server saw of one request.
type received struct {
	method string
	header http.Header
	body   []byte
}

// recordingServer answers 204 and hands each request to the returned channel.
func recordingServer(t *testing.T) (*httptest.Server, <-chan received) {
	t.Helper()
	got := make(chan received, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("server: read body: %v", err)
		}
		got <- received{method: r.Method, header: r.Header.Clone(), body: body}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func TestNewHTTPTargetValidates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		cfg     HTTPTargetConfig
		wantErr string
	}{
		{"empty url", HTTPTargetConfig{}, "url"},
		{"relative url", HTTPTargetConfig{URL: "/hooks/orders"}, "url"},
		{"no host", HTTPTargetConfig{URL: "http:///hooks"}, "url"},
		{"other scheme", HTTPTargetConfig{URL: "ftp://example.com/x"}, "url"},
		{"unparsable url", HTTPTargetConfig{URL: "http://user:secret@%zz/"}, "url"},
		{"negative timeout", HTTPTargetConfig{URL: "http://example.com", Timeout: -time.Second}, "timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := NewHTTPTarget(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want one naming %q", err, tc.wantErr)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("err = %v leaks the URL's password", err)
			}
		})
	}

	target := newTestTarget(t, HTTPTargetConfig{URL: "https://example.com/hooks"})
	if target.timeout != defaultHTTPTimeout {
		t.Errorf("default timeout = %s, want %s", target.timeout, defaultHTTPTimeout)
	}
}

func TestHTTPTargetSendsBodyByteForByte(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		payload []byte
	}{
		{"binary", []byte{0x00, 0xff, 0xfe, 'a', '\r', '\n', 0x80, 0xc3}},
		{"empty", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, got := recordingServer(t)
			target := newTestTarget(t, HTTPTargetConfig{URL: srv.URL})

			if err := target.Handle(context.Background(), &Job{ID: 1, Attempt: 1, Payload: tc.payload}); err != nil {
				t.Fatalf("Handle: %v", err)
			}
			r := <-got
			if r.method != http.MethodPost {
				t.Errorf("method = %s, want POST", r.method)
			}
			if !bytes.Equal(r.body, tc.payload) {
				t.Errorf("body = %x, want %x", r.body, tc.payload)
			}
		})
	}
}

func TestHTTPTargetHeaders(t *testing.T) {
	t.Parallel()
	version := int64(17)
	for _, tc := range []struct {
		name string
		job  *Job
		want http.Header
	}{
		{
			name: "all fields",
			job: &Job{
				ID: 42, Kind: "order.created", Queue: "orders", Key: "customer-7",
				Version: &version, Attempt: 3, Token: 9001,
				Source: Source{Topic: "orders", Partition: 2, Offset: 1234},
				Headers: []Header{
					{Key: "Content-Type", Value: []byte("application/json; charset=utf-8")},
					{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
					{Key: "x-tenant", Value: []byte("acme")},
					{Key: "x-tenant", Value: []byte("globex")},
					{Key: "latin1", Value: []byte{'c', 0xe9, 'l'}},
					{Key: "null-value", Value: nil},
				},
			},
			want: http.Header{
				"Content-Type":                 {"application/json; charset=utf-8"},
				"Idempotency-Key":              {"42"},
				"Switchyard-Job-Id":            {"42"},
				"Switchyard-Kind":              {"order.created"},
				"Switchyard-Queue":             {"orders"},
				"Switchyard-Attempt":           {"3"},
				"Switchyard-Key":               {"customer-7"},
				"Switchyard-Version":           {"17"},
				"Switchyard-Source":            {"orders/2/1234"},
				"Switchyard-Token":             {"9001"},
				"Traceparent":                  {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
				"Switchyard-Header-X-Tenant":   {"acme", "globex"},
				"Switchyard-Header-Latin1":     {"c\xe9l"},
				"Switchyard-Header-Null-Value": {""},
				"User-Agent":                   {"switchyard"},
			},
		},
		{
			name: "defaults and omissions",
			job:  &Job{ID: 5, Kind: "ping", Queue: "default", Attempt: 1},
			want: http.Header{
				"Content-Type":       {"application/octet-stream"},
				"Idempotency-Key":    {"5"},
				"Switchyard-Job-Id":  {"5"},
				"Switchyard-Kind":    {"ping"},
				"Switchyard-Queue":   {"default"},
				"Switchyard-Attempt": {"1"},
				"Switchyard-Key":     {""},
				"Switchyard-Token":   {"0"},
				"User-Agent":         {"switchyard"},
			},
		},
		{
			name: "invalid names and values are skipped",
			job: &Job{
				ID: 6, Kind: "ping", Queue: "default", Key: "k\r\nX-Injected: 1", Attempt: 2,
				Headers: []Header{
					{Key: "content-type", Value: []byte("text/plain\r\nX-Injected: 1")},
					{Key: "CONTENT-TYPE", Value: []byte("text/plain")},
					{Key: "bad name", Value: []byte("v")},
					{Key: "bad:name", Value: []byte("v")},
					{Key: "X-Evil\r\nX-Injected", Value: []byte("1")},
					{Key: "", Value: []byte("v")},
					{Key: "crlf", Value: []byte("a\r\nX-Injected: 1")},
					{Key: "nul", Value: []byte("a\x00b")},
					{Key: "del", Value: []byte("a\x7fb")},
					{Key: "tab", Value: []byte("a\tb")},
				},
			},
			want: http.Header{
				"Content-Type":          {"text/plain"},
				"Idempotency-Key":       {"6"},
				"Switchyard-Job-Id":     {"6"},
				"Switchyard-Kind":       {"ping"},
				"Switchyard-Queue":      {"default"},
				"Switchyard-Attempt":    {"2"},
				"Switchyard-Token":      {"0"},
				"Switchyard-Header-Tab": {"a\tb"},
				"User-Agent":            {"switchyard"},
			},
		},
		{
			// The receiver would trim it into another key, "customer-7".
			name: "a key with outer spaces is left out",
			job:  &Job{ID: 7, Kind: "ping", Queue: "default", Key: " customer-7\t", Attempt: 1},
			want: http.Header{
				"Content-Type":       {"application/octet-stream"},
				"Idempotency-Key":    {"7"},
				"Switchyard-Job-Id":  {"7"},
				"Switchyard-Kind":    {"ping"},
				"Switchyard-Queue":   {"default"},
				"Switchyard-Attempt": {"1"},
				"Switchyard-Token":   {"0"},
				"User-Agent":         {"switchyard"},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, got := recordingServer(t)
			target := newTestTarget(t, HTTPTargetConfig{URL: srv.URL})

			if err := target.Handle(context.Background(), tc.job); err != nil {
				t.Fatalf("Handle: %v", err)
			}
			h := (<-got).header
			// Added by net/http itself, not by the protocol.
			h.Del("Accept-Encoding")
			h.Del("Content-Length")
			if !reflect.DeepEqual(h, tc.want) {
				t.Errorf("headers:\n got %q\nwant %q", h, tc.want)
			}
		})
	}
}

func TestHTTPTargetOutcomes(t *testing.T) {
	t.Parallel()
	clock := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

	type outcome int
	const (
		succeeded outcome = iota
		transient
		permanent
	)
	status := func(code int, header ...string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			for i := 0; i+1 < len(header); i += 2 {
				w.Header().Set(header[i], header[i+1])
			}
			w.WriteHeader(code)
			_, _ = io.WriteString(w, "reason from target\n")
		}
	}
	redirects := http.NewServeMux()
	redirects.Handle("/start", http.RedirectHandler("/final", http.StatusFound))
	redirects.Handle("/keep", http.RedirectHandler("/final", http.StatusTemporaryRedirect))
	redirects.Handle("/loop", http.RedirectHandler("/loop", http.StatusTemporaryRedirect))
	redirects.HandleFunc("/final", func(w http.ResponseWriter, r *http.Request) {
		// Only a POST counts as delivered (the body rides along with it).
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		w.WriteHeader(http.StatusOK)
	})

	for _, tc := range []struct {
		name      string
		handler   http.Handler
		path      string
		follow    bool
		want      outcome
		wantDelay time.Duration // checked when hasDelay
		hasDelay  bool
		wantText  string // in the error, when there is one
	}{
		{name: "200", handler: status(200), want: succeeded},
		{name: "204", handler: status(204), want: succeeded},
		{name: "400", handler: status(400), want: permanent, wantText: "400 Bad Request: reason from target"},
		{name: "404", handler: status(404), want: permanent, wantText: "404"},
		{name: "409", handler: status(409), want: permanent, wantText: "409"},
		{name: "408", handler: status(408), want: transient, wantText: "408"},
		{name: "425", handler: status(425), want: transient, wantText: "425"},
		{name: "429 without Retry-After", handler: status(429), want: transient, wantText: "429"},
		{name: "429 Retry-After seconds", handler: status(429, "Retry-After", "120"),
			want: transient, hasDelay: true, wantDelay: 2 * time.Minute, wantText: "429"},
		{name: "429 Retry-After HTTP-date", handler: status(429, "Retry-After", clock.Add(90*time.Second).Format(http.TimeFormat)),
			want: transient, hasDelay: true, wantDelay: 90 * time.Second},
		{name: "429 Retry-After date in the past", handler: status(429, "Retry-After", clock.Add(-time.Hour).Format(http.TimeFormat)),
			want: transient, hasDelay: true, wantDelay: 0},
		{name: "429 Retry-After negative", handler: status(429, "Retry-After", "-5"),
			want: transient, hasDelay: true, wantDelay: 0},
		{name: "429 Retry-After past int64", handler: status(429, "Retry-After", "99999999999999999999"),
			want: transient, hasDelay: true, wantDelay: math.MaxInt64 / time.Second * time.Second, wantText: "429"},
		{name: "429 Retry-After unparsable", handler: status(429, "Retry-After", "soon"), want: transient},
		{name: "503 Retry-After", handler: status(503, "Retry-After", "7"),
			want: transient, hasDelay: true, wantDelay: 7 * time.Second, wantText: "503"},
		{name: "500 ignores Retry-After", handler: status(500, "Retry-After", "7"), want: transient, wantText: "500"},
		// A redirect not followed says where it pointed and why.
		{name: "302 not followed", handler: redirects, path: "/start", want: permanent,
			wantText: "302 Found to http://127.0.0.1"},
		{name: "302 not followed even when following: it would drop the body", handler: redirects, path: "/start", follow: true, want: permanent,
			wantText: "/final (not followed: only 307 and 308 keep the POST and its body)"},
		{name: "307 not followed when not following", handler: redirects, path: "/keep", want: permanent,
			wantText: "/final (not followed: follow_redirects is off)"},
		{name: "307 followed with the body", handler: redirects, path: "/keep", follow: true, want: succeeded},
		{name: "redirect loop stops", handler: redirects, path: "/loop", follow: true, want: permanent,
			wantText: "/loop (not followed: 10 redirects already)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(tc.handler)
			t.Cleanup(srv.Close)
			target := newTestTarget(t, HTTPTargetConfig{URL: srv.URL + tc.path, FollowRedirects: tc.follow})
			target.now = func() time.Time { return clock }

			err := target.Handle(context.Background(), &Job{ID: 1, Attempt: 1})
			switch tc.want {
			case succeeded:
				if err != nil {
					t.Fatalf("err = %v, want success", err)
				}
				return
			case transient:
				if err == nil || IsPermanent(err) {
					t.Fatalf("err = %v, want a transient error", err)
				}
			case permanent:
				if !IsPermanent(err) {
					t.Fatalf("err = %v, want a permanent error", err)
				}
			}
			if !strings.Contains(err.Error(), tc.wantText) {
				t.Errorf("err = %q, want it to contain %q", err, tc.wantText)
			}
			d, ok := RetryDelay(err)
			if ok != tc.hasDelay || d != tc.wantDelay {
				t.Errorf("RetryDelay = %s, %t; want %s, %t", d, ok, tc.wantDelay, tc.hasDelay)
			}
		})
	}
}

func TestHTTPTargetTruncatesErrorBody(t *testing.T) {
	t.Parallel()
	head := strings.Repeat("a", maxErrorBody)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusUnprocessableEntity)
		_, _ = io.WriteString(w, head+strings.Repeat("b", 100<<10-maxErrorBody))
	}))
	t.Cleanup(srv.Close)
	target := newTestTarget(t, HTTPTargetConfig{URL: srv.URL})

	err := target.Handle(context.Background(), &Job{ID: 1, Attempt: 1})
	if !IsPermanent(err) {
		t.Fatalf("err = %v, want permanent", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "422") || !strings.HasSuffix(msg, ": "+head) {
		t.Errorf("err = %.100q... (%d bytes), want status 422 and exactly the first 4 KiB of the body", msg, len(msg))
	}
}

// A 2xx body is kept as the job's result, with its content type, up to
// ResultMaxBytes; 0 keeps none.
func TestHTTPTargetKeepsTheResult(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"invoice":"INV-7","pages":3}`)
	}))
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		keep int
		want string
	}{{1 << 10, `{"invoice":"INV-7","pages":3}`}, {12, `{"invoice":"`}, {0, ""}} {
		job := &Job{ID: 1, Attempt: 1}
		if err := newTestTarget(t, HTTPTargetConfig{URL: srv.URL, ResultMaxBytes: tc.keep}).Handle(context.Background(), job); err != nil {
			t.Fatal(err)
		}
		ct, data := job.Result()
		switch {
		case tc.keep == 0 && (data != nil || ct != ""):
			t.Errorf("keep 0: result %q %q, want none", ct, data)
		case tc.keep > 0 && (ct != "application/json" || string(data) != tc.want):
			t.Errorf("keep %d: result %q %q, want application/json %q", tc.keep, ct, data, tc.want)
		}
	}
}

func TestHTTPTargetErrorBodyIsValidText(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte{'o', 0xff, 'k', 0x00})
	}))
	t.Cleanup(srv.Close)
	target := newTestTarget(t, HTTPTargetConfig{URL: srv.URL})

	err := target.Handle(context.Background(), &Job{ID: 1, Attempt: 1})
	if want := "o\uFFFDk\uFFFD"; err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("err = %q, want it to end in %q", err, want)
	}
}

func TestHTTPTargetReusesConnections(t *testing.T) {
	t.Parallel()
	var dials atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		// Larger than what reaches the error, smaller than the drain bound.
		_, _ = io.WriteString(w, strings.Repeat("x", 3*maxErrorBody))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dials.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	target := newTestTarget(t, HTTPTargetConfig{URL: srv.URL})

	for range 3 {
		if err := target.Handle(context.Background(), &Job{ID: 1, Attempt: 1}); !IsPermanent(err) {
			t.Fatalf("err = %v, want permanent", err)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("server saw %d connections for 3 sequential attempts, want 1", n)
	}
}

func TestHTTPTargetTLSWithClientTransport(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	target := newTestTarget(t, HTTPTargetConfig{URL: srv.URL, Client: srv.Client()})

	if err := target.Handle(context.Background(), &Job{ID: 1, Attempt: 1}); err != nil {
		t.Fatalf("Handle: %v", err)
	}
}

func TestHTTPTargetConnectionRefusedIsTransient(t *testing.T) {
	t.Parallel()
	// A closed server's address: nothing listens there any more.
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	target := newTestTarget(t, HTTPTargetConfig{URL: srv.URL})

	err := target.Handle(context.Background(), &Job{ID: 1, Attempt: 1})
	if err == nil || IsPermanent(err) {
		t.Fatalf("err = %v, want transient", err)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("err = %v, want it to wrap ECONNREFUSED", err)
	}
	if _, ok := RetryDelay(err); ok {
		t.Errorf("err = %v carries a retry delay, want plain backoff", err)
	}
}

// hangingServer never answers; it reports each request whose context it saw
// cancelled, which is how it learns the client gave up.
func hangingServer(t *testing.T) (srv *httptest.Server, started, aborted <-chan struct{}) {
	t.Helper()
	startedc := make(chan struct{}, 1)
	abortedc := make(chan struct{}, 1)
	srv = httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		startedc <- struct{}{}
		<-r.Context().Done()
		abortedc <- struct{}{}
	}))
	t.Cleanup(srv.Close)
	return srv, startedc, abortedc
}

func waitFor(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func TestHTTPTargetTimeoutIsTransient(t *testing.T) {
	t.Parallel()
	srv, _, aborted := hangingServer(t)
	target := newTestTarget(t, HTTPTargetConfig{URL: srv.URL, Timeout: 200 * time.Millisecond})

	err := target.Handle(context.Background(), &Job{ID: 1, Attempt: 1})
	if err == nil || IsPermanent(err) {
		t.Fatalf("err = %v, want transient", err)
	}
	if !strings.Contains(err.Error(), "timeout after 200ms") {
		t.Errorf("err = %q, want it to say %q", err, "timeout after 200ms")
	}
	waitFor(t, aborted, "the server to see the request cancelled")
}

func TestHTTPTargetCancelAbortsRequest(t *testing.T) {
	t.Parallel()
	srv, started, aborted := hangingServer(t)
	target := newTestTarget(t, HTTPTargetConfig{URL: srv.URL})

	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	errc := make(chan error, 1)
	go func() { errc <- target.Handle(ctx, &Job{ID: 1, Attempt: 1}) }()

	waitFor(t, started, "the request to reach the server")
	cancel(ErrLeaseLost)

	var err error
	select {
	case err = <-errc:
	case <-time.After(waitTimeout):
		t.Fatal("Handle did not return after its context was cancelled")
	}
	if !errors.Is(err, ErrLeaseLost) {
		t.Errorf("err = %v, want it to wrap ErrLeaseLost", err)
	}
	if err != nil && !strings.Contains(err.Error(), "request aborted") {
		t.Errorf("err = %q, want it to say the request was aborted", err)
	}
	if IsPermanent(err) {
		t.Errorf("err = %v is permanent, want a cancellation", err)
	}
	waitFor(t, aborted, "the server to see the request cancelled")
}

// A 2xx whose body trickles frees the worker shortly after the status
// line: the attempt returns while the target is still sending.
func TestHTTPTargetSuccessDoesNotWaitForATricklingBody(t *testing.T) {
	t.Parallel()
	sending := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		defer close(sending)
		w.WriteHeader(http.StatusOK)
		for range 200 { // 20 s in all, well inside the attempt timeout
			if _, err := io.WriteString(w, "x"); err != nil {
				return // the client hung up: what we want
			}
			w.(http.Flusher).Flush()
			time.Sleep(100 * time.Millisecond) // the target's slowness, not a sync
		}
	}))
	t.Cleanup(srv.Close)
	target := newTestTarget(t, HTTPTargetConfig{URL: srv.URL, Timeout: time.Minute})
	if err := target.Handle(context.Background(), &Job{ID: 1, Attempt: 1}); err != nil {
		t.Fatalf("err = %v, want success", err)
	}
	select {
	case <-sending:
		t.Fatal("the attempt waited for the whole body")
	default:
	}
	select {
	case <-sending: // the target saw the connection close
	case <-time.After(waitTimeout):
		t.Fatal("the connection was not closed")
	}
}

// A followed redirect never leaves the configured host: a 307 to another
// host comes back as a permanent failure, and that host gets nothing.
func TestHTTPTargetRedirectStaysOnItsHost(t *testing.T) {
	t.Parallel()
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		elsewhere.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(other.Close)
	mux := http.NewServeMux()
	mux.Handle("/away", http.RedirectHandler(other.URL+"/steal?token=s3cr3t", http.StatusTemporaryRedirect))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	target := newTestTarget(t, HTTPTargetConfig{URL: srv.URL + "/away", FollowRedirects: true})
	err := target.Handle(context.Background(), &Job{ID: 1, Attempt: 1, Payload: []byte("secret payload")})
	if !IsPermanent(err) || !strings.Contains(err.Error(), "307") {
		t.Fatalf("err = %v, want a permanent 307", err)
	}
	// The error names where it pointed, redacted, and why it stayed.
	want := "to " + other.URL + "/steal?token=xxxxx (not followed: not the configured scheme and host)"
	if !strings.Contains(err.Error(), want) {
		t.Errorf("err = %q, want it to contain %q", err, want)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Fatalf("the other host got %d requests", n)
	}
}

// A secret in the target URL's query string (or its password) never
// reaches an error, which becomes the job's last_error and log lines.
func TestHTTPTargetErrorsRedactTheURL(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: the attempt fails to connect
	target := newTestTarget(t, HTTPTargetConfig{URL: "http://user:pa55word@" + addr + "/hook?token=s3cr3t&team=a"})
	err = target.Handle(context.Background(), &Job{ID: 1, Attempt: 1})
	if err == nil {
		t.Fatal("want a connection error")
	}
	msg := err.Error()
	for _, secret := range []string{"s3cr3t", "pa55word"} {
		if strings.Contains(msg, secret) {
			t.Errorf("error %q shows %s", msg, secret)
		}
	}
	if !strings.Contains(msg, addr+"/hook?") || !strings.Contains(msg, "token=xxxxx") {
		t.Errorf("error %q does not say which target failed", msg)
	}
	if got := RedactURL("https://h/p?a=1&b=2"); got != "https://h/p?a=xxxxx&b=xxxxx" {
		t.Errorf("RedactURL = %q", got)
	}
}
