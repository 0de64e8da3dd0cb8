package workers

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard-dev/switchyard/internal/tracing"
)

const (
	defaultHTTPTimeout = 10 * time.Second

	// maxErrorBody is how much of a response body reaches the job's error
	// (SPEC §5: "the first 4 KiB of the body").
	maxErrorBody = 4 << 10
	// maxDrain bounds what is read past maxErrorBody so the connection can
	// go back to the pool. A target that sends more than this loses its
	// connection instead of costing us unbounded reads.
	maxDrain = 64 << 10

	// maxRedirects matches net/http's own default limit.
	maxRedirects = 10

	// maxIdlePerHost is sized for a whole worker pool posting to one
	// target at once; net/http's default of 2 would make every request
	// beyond the second dial a new connection.
	maxIdlePerHost = 256

	// successDrain bounds how long a 2xx body is read after the status
	// line, only so that the connection can be reused: a target that
	// trickles its body must not hold a worker. errorBodyWait bounds the
	// read of an error body, whose first 4 KiB become the job's error.
	successDrain  = 100 * time.Millisecond
	errorBodyWait = time.Second

	defaultContentType  = "application/octet-stream"
	recordHeaderPrefix  = "Switchyard-Header-"
	httpTargetUserAgent = "switchyard"
)

// HTTPTargetConfig configures an HTTPTarget.
type HTTPTargetConfig struct {
	// URL is the absolute http or https URL every attempt is POSTed to.
	// Required. It comes from configuration only, never from a job.
	URL string
	// Timeout bounds one attempt, from dialling to the response headers
	// and the error body. Defaults to 10s.
	Timeout time.Duration
	// FollowRedirects follows up to 10 redirects of status 307 or 308 (the
	// ones that keep the POST and its body) on the URL's own scheme and
	// host. Defaults to false. A 3xx that is not followed is a permanent
	// failure, because a target that moved is a configuration error that
	// retrying will not fix; its error says where it pointed and why it
	// was not followed.
	FollowRedirects bool
	// ResultMaxBytes is how much of a 2xx body is kept as the job's
	// result (Job.SetResult, with the response's Content-Type): what
	// arrives of it within 100 ms of the status line. 0 keeps none.
	ResultMaxBytes int
	// Client, when set, supplies the Transport (for example a test server's
	// TLS setup). Only its Transport is used: the timeout, redirect policy
	// and the absence of a cookie jar are the target's own. Defaults to a
	// Transport tuned for many concurrent requests to one host.
	Client *http.Client
	// Tracer, when set, gives each call an OpenTelemetry client span, a
	// child of the span in the context it is handed (the dispatcher's
	// attempt span), and sends the target that span's traceparent in
	// place of the record's, so that the target's own span is its
	// child. Nil (the default) starts no span and passes the record's
	// traceparent, if valid, through as it is.
	Tracer trace.Tracer
}

func (c *HTTPTargetConfig) validate() error {
	u, err := url.Parse(c.URL)
	if err != nil {
		// url.Parse's error quotes the whole URL, which may carry
		// credentials; keep only the reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("http target: url: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return errors.New("http target: url: must be an absolute http or https URL")
	}
	if c.Timeout < 0 {
		return fmt.Errorf("http target: timeout: must not be negative, got %s", c.Timeout)
	}
	if c.ResultMaxBytes < 0 {
		return fmt.Errorf("http target: result_max_bytes: must not be negative, got %d", c.ResultMaxBytes)
	}
	return nil
}

// HTTPTarget is a Handler that runs each attempt by POSTing the job to a URL,
// following SPEC §5.
//
// The request body is the job payload byte for byte. Headers:
//
//	Content-Type         the record's content-type header, else application/octet-stream
//	Idempotency-Key      job id
//	Switchyard-Job-Id    job id
//	Switchyard-Kind, Switchyard-Queue, Switchyard-Key
//	Switchyard-Attempt   1-based attempt number
//	Switchyard-Version   only when the job has a version
//	Switchyard-Source    topic/partition/offset, only for jobs from Kafka
//	Switchyard-Token     the attempt's fencing token (an extension to SPEC §5)
//	Switchyard-Attempt-Secret  proves the attempt to POST /v1/jobs/{id}/checkpoint
//	Switchyard-Checkpoint      base64 of the last checkpoint an earlier attempt saved
//	traceparent          when the record carried a valid one; with a Tracer,
//	                     the call's client span's instead
//	Switchyard-Header-<name>  each other record header, repeated keys as repeated values
//
// Switchyard-Token increases with every lease of a job, so a target that
// stores the highest token seen per job id can refuse a write from an attempt
// whose lease has already been taken over.
//
// Record headers are matched by name case-insensitively, as HTTP will treat
// them anyway; for content-type and traceparent the first usable one wins
// (for traceparent, the first valid W3C one).
// A header whose name is not an HTTP token, or whose value holds control
// characters (CR and LF included), is left out rather than failing the job:
// a record's headers are the producer's data, and one odd header must not
// make a job undeliverable.
//
// Outcomes: 2xx succeeds; 408, 425, 429, 5xx, a timeout or a connection error
// is transient, with the delay from Retry-After on 429 and 503; any other
// status, including 3xx when redirects are not followed or run out, is
// Permanent with the status and the first 4 KiB of the body. When the
// context passed to Handle is cancelled the request is aborted and the error
// wraps context.Cause.
type HTTPTarget struct {
	url string
	// shownURL is url with its password and query values redacted: what
	// errors and logs may show of it.
	shownURL string
	timeout  time.Duration
	follow   bool // FollowRedirects
	result   int  // ResultMaxBytes
	client   *http.Client
	now      func() time.Time // for Retry-After HTTP-dates
	tracer   trace.Tracer     // nil: no spans
	host     string           // server.address of the spans
}

// NewHTTPTarget validates cfg and returns a target with its own client.
func NewHTTPTarget(cfg HTTPTargetConfig) (*HTTPTarget, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = defaultHTTPTimeout
	}
	var transport http.RoundTripper
	if cfg.Client != nil {
		transport = cfg.Client.Transport
	} else {
		transport = &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			MaxIdleConns:        maxIdlePerHost,
			MaxIdleConnsPerHost: maxIdlePerHost,
			IdleConnTimeout:     90 * time.Second,
			TLSHandshakeTimeout: 10 * time.Second,
		}
	}
	return &HTTPTarget{
		url:      cfg.URL,
		shownURL: RedactURL(cfg.URL),
		timeout:  cfg.Timeout,
		follow:   cfg.FollowRedirects,
		result:   cfg.ResultMaxBytes,
		client: &http.Client{
			Transport:     transport,
			CheckRedirect: checkRedirect(cfg.FollowRedirects),
		},
		now:    time.Now,
		tracer: cfg.Tracer,
		host:   targetHost(cfg.URL),
	}, nil
}

// targetHost is the URL's host name, for spans.
func targetHost(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Hostname()
	}
	return ""
}

// checkRedirect returns the redirect policy. Both policies end in
// ErrUseLastResponse rather than an error, so the 3xx itself comes back and
// is reported like any other unexpected status, body included.
func checkRedirect(follow bool) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		// net/http turns a POST into a body-less GET on 301/302/303; the
		// record would then reach nobody while the job counted as done.
		// Only redirects that keep the method and body (307, 308) are
		// followed, and only on the configured scheme and host: a target
		// must not be able to send a job's payload and headers to a host
		// nobody configured.
		first := via[0].URL
		if !follow || len(via) >= maxRedirects || req.Method != via[0].Method ||
			req.URL.Scheme != first.Scheme || !strings.EqualFold(req.URL.Host, first.Host) {
			return http.ErrUseLastResponse
		}
		return nil
	}
}

// RedactURL is a URL as logs and errors may show it: its password and
// every query value replaced by "xxxxx", since either may be a secret
// (?token=…). An unparsable URL is not shown at all.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(invalid URL)"
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			q[k] = []string{"xxxxx"}
		}
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// Handle runs one attempt; see HTTPTarget for the protocol and outcomes.
func (t *HTTPTarget) Handle(ctx context.Context, job *Job) error {
	if t.tracer == nil {
		return t.call(ctx, job, nil)
	}
	ctx, span := t.tracer.Start(ctx, tracing.SpanTargetCall, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(tracing.AttrHTTPMethod.String(http.MethodPost), tracing.AttrURL.String(t.shownURL),
			tracing.AttrServerAddress.String(t.host)))
	defer span.End()
	err := t.call(ctx, job, span)
	if err != nil {
		msg := err.Error()
		if len(msg) > maxSpanError {
			msg = strings.ToValidUTF8(msg[:maxSpanError], "")
		}
		span.SetStatus(codes.Error, msg)
	}
	return err
}

// maxSpanError bounds the error text a client span carries.
const maxSpanError = 1024

// call is one attempt; span, when tracing is on, is the attempt's client
// span, whose traceparent replaces the record's.
func (t *HTTPTarget) call(ctx context.Context, job *Job, span trace.Span) error {
	attemptCtx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()

	req, err := http.NewRequestWithContext(attemptCtx, http.MethodPost, t.url, bytes.NewReader(job.Payload))
	if err != nil {
		// The URL was validated and the method is fixed, so this is a bug
		// that no retry would get past.
		return Permanent(fmt.Errorf("http target: build request: %w", err))
	}
	setRequestHeaders(req.Header, job)
	if span != nil {
		tracing.Propagator.Inject(ctx, propagation.HeaderCarrier(req.Header))
	}

	resp, err := t.client.Do(req)
	if err != nil {
		// Check the caller's context first: when it is done, the attempt
		// context is done too, and the cause (lease lost, shutdown,
		// cancelled) is what dispatch needs to see.
		if ctx.Err() != nil {
			return fmt.Errorf("http target: request aborted: %w", context.Cause(ctx))
		}
		if errors.Is(attemptCtx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("http target: timeout after %s", t.timeout)
		}
		// A *url.Error quotes the request's URL, query string and all
		// (net/http hides only a password): show the redacted one.
		var ue *url.Error
		if errors.As(err, &ue) {
			return fmt.Errorf("http target: %s %s: %w", ue.Op, t.shownURL, ue.Err)
		}
		return fmt.Errorf("http target: %w", err)
	}
	code := resp.StatusCode
	if span != nil {
		span.SetAttributes(tracing.AttrHTTPStatus.Int(code))
	}
	if code >= 200 && code <= 299 {
		// Beyond the result, reading on would only let the connection be
		// reused: cut it off (cancelling the attempt aborts the read) if
		// it takes longer.
		stop := time.AfterFunc(successDrain, cancel)
		var result []byte
		if t.result > 0 {
			result, _ = io.ReadAll(io.LimitReader(resp.Body, int64(t.result)))
		}
		consumeBody(resp.Body)
		stop.Stop()
		if t.result > 0 {
			job.SetResult(resp.Header.Get("Content-Type"), result)
		}
		return nil
	}
	stop := time.AfterFunc(errorBodyWait, cancel)
	body := consumeBody(resp.Body)
	stop.Stop()

	switch {
	case code == http.StatusRequestTimeout, code == http.StatusTooEarly,
		code == http.StatusTooManyRequests, code >= 500 && code <= 599:
		err := statusError(resp.Status, body)
		if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
			if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), t.now()); ok {
				return RetryAfter(d, err)
			}
		}
		return err
	case code >= 300 && code <= 399:
		return Permanent(statusError(resp.Status+" "+t.redirectNote(resp), body))
	default:
		return Permanent(statusError(resp.Status, body))
	}
}

// maxShownLocation bounds the Location a redirect's error quotes.
const maxShownLocation = 512

// redirectNote says where a 3xx that came back pointed and why it was not
// followed. "status 308 Permanent Redirect" alone leaves a target's
// author guessing, and with follow_redirects on it reads as a bug. The
// Location is redacted as the target URL is: it may carry a token too.
func (t *HTTPTarget) redirectNote(resp *http.Response) string {
	loc, err := resp.Location()
	if err != nil {
		return "(not followed: no usable Location)"
	}
	to := RedactURL(loc.String())
	if len(to) > maxShownLocation {
		to = strings.ToValidUTF8(to[:maxShownLocation], "") + "…"
	}
	to = "to " + to
	first, _ := url.Parse(t.url) // validated by NewHTTPTarget
	switch {
	case !t.follow:
		return to + " (not followed: follow_redirects is off)"
	case resp.StatusCode != http.StatusTemporaryRedirect && resp.StatusCode != http.StatusPermanentRedirect:
		return to + " (not followed: only 307 and 308 keep the POST and its body)"
	case loc.Scheme != first.Scheme || !strings.EqualFold(loc.Host, first.Host):
		return to + " (not followed: not the configured scheme and host)"
	default:
		return to + fmt.Sprintf(" (not followed: %d redirects already)", maxRedirects)
	}
}

// setRequestHeaders writes the SPEC §5 headers for job into h.
//
// Setting Idempotency-Key also lets net/http resend the POST on its own when
// a pooled keep-alive connection turns out to be closed by the server before
// the request was written; without it a non-idempotent method is never
// replayed and such races would surface as transient job failures.
func setRequestHeaders(h http.Header, job *Job) {
	id := strconv.FormatInt(job.ID, 10)
	h.Set("User-Agent", httpTargetUserAgent)
	h.Set("Idempotency-Key", id)
	h.Set("Switchyard-Job-Id", id)
	setValid(h, "Switchyard-Kind", job.Kind)
	setValid(h, "Switchyard-Queue", job.Queue)
	h.Set("Switchyard-Attempt", strconv.Itoa(job.Attempt))
	// A receiver strips a field value's leading and trailing spaces and
	// tabs (RFC 9110 §5.5), so a key " c42" would reach the target as
	// "c42", another key's: left out instead, like a key with a CR.
	if strings.Trim(job.Key, " \t") == job.Key {
		setValid(h, "Switchyard-Key", job.Key)
	}
	if job.Version != nil {
		h.Set("Switchyard-Version", strconv.FormatInt(*job.Version, 10))
	}
	if job.Source.Topic != "" {
		setValid(h, "Switchyard-Source", job.Source.String())
	}
	h.Set("Switchyard-Token", strconv.FormatInt(job.Token, 10))
	if secret := job.AttemptSecret(); secret != "" {
		h.Set("Switchyard-Attempt-Secret", secret)
	}
	if job.Checkpoint != nil {
		h.Set("Switchyard-Checkpoint", base64.StdEncoding.EncodeToString(job.Checkpoint))
	}

	contentType := ""
	traceparent := ""
	for _, rh := range job.Headers {
		v := string(rh.Value)
		switch {
		case strings.EqualFold(rh.Key, "content-type"):
			if contentType == "" && validHeaderValue(v) {
				contentType = v
			}
		case strings.EqualFold(rh.Key, tracing.HeaderName):
			// Only a valid W3C traceparent: anything else would root the
			// target's trace in garbage.
			if traceparent == "" && tracing.Parse(v).IsValid() {
				traceparent = v
			}
		case validHeaderName(rh.Key) && validHeaderValue(v):
			h.Add(recordHeaderPrefix+rh.Key, v)
		}
	}
	if contentType == "" {
		contentType = defaultContentType
	}
	h.Set("Content-Type", contentType)
	if traceparent != "" {
		h.Set("Traceparent", traceparent)
	}
}

// setValid sets a header whose value comes from job data. net/http refuses
// to send a request with an invalid header value, so such a value is left
// out instead of failing every attempt of the job.
func setValid(h http.Header, name, value string) {
	if validHeaderValue(value) {
		h.Set(name, value)
	}
}

// validHeaderName reports whether s is a non-empty token (RFC 9110 §5.1).
// net/http would reject the whole request otherwise.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue reports whether s can be sent as a field value: no control
// characters other than horizontal tab (RFC 9110 §5.5). Bytes of 0x80 and
// above (obs-text) are allowed, as net/http allows them; CR and LF never
// are, which is what keeps a record header from injecting headers.
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// consumeBody returns up to maxErrorBody bytes of body, then drains a bounded
// amount more and closes it: net/http only reuses a connection whose body was
// read to the end. Read errors are ignored because the status has already
// decided the outcome; the body only adds detail to the error.
func consumeBody(body io.ReadCloser) []byte {
	b, _ := io.ReadAll(io.LimitReader(body, maxErrorBody))
	_, _ = io.CopyN(io.Discard, body, maxDrain)
	_ = body.Close()
	return b
}

// statusError describes an unwanted response. The body is made valid UTF-8
// without NULs because the error text is stored in a Postgres text column,
// which accepts neither; truncation at 4 KiB can also split a character.
func statusError(status string, body []byte) error {
	text := strings.TrimSpace(strings.ToValidUTF8(string(body), "\uFFFD"))
	text = strings.ReplaceAll(text, "\x00", "\uFFFD")
	if text == "" {
		return fmt.Errorf("http target: status %s", status)
	}
	return fmt.Errorf("http target: status %s: %s", status, text)
}

// parseRetryAfter reads a Retry-After value: delay-seconds or an HTTP-date
// (RFC 9110 §10.2.3). A delay in the past or below zero means retry now.
// ok is false when the value is absent or unparsable, and the route's own
// backoff then applies.
func parseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	// A count of seconds past int64 is ErrRange, with secs at the
	// limit of its sign: a target that asks for "forever" is capped by
	// backoff.max like one that asks for an hour, not ignored for the
	// route's first, shortest backoff.
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		// Clamp before converting so a huge value cannot overflow into a
		// negative Duration; backoff.max caps the delay later anyway.
		const maxSecs = math.MaxInt64 / int64(time.Second)
		return time.Duration(max(0, min(secs, maxSecs))) * time.Second, true
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(0, at.Sub(now)), true
	}
	return 0, false
}
