package ingest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
)

// DLQ reasons for records that cannot become jobs (I6).
const (
	ReasonDecode       = "decode"
	ReasonMissingField = "missing_field"
	ReasonTooLarge     = "too_large"
)

// Route is a config route compiled for decoding: field paths parsed once.
type Route struct {
	// Name identifies the route (jobs.route, DLQ entries, metrics).
	Name           string
	Topic          string
	Kind           string
	Queue          string
	Ordered        bool
	MaxAttempts    int
	TTL            time.Duration
	MaxRecordBytes int
	// DLQMaxBytes is how much of a too_large record its DLQ entry keeps.
	DLQMaxBytes int
	// Lane is the lane policy of an ordered route, nil otherwise.
	Lane *pgstore.LanePolicy
	// Coalesce: a newer job of a key replaces its unstarted ones.
	Coalesce bool
	// Limited: the route has fleet-wide flow limits, so its jobs carry a
	// group value (the record's, read from group, or pgstore.GroupAll).
	Limited bool
	// Delay runs a job this long after its record's timestamp.
	Delay time.Duration

	key, dedupe, version, group, runAt source
	// filter is nil when the route takes every record of its topic.
	filter *filter
}

// filter is a compiled config.Filter: the values of source it takes.
type filter struct {
	source
	in map[string]bool
}

// source says where a value comes from; the zero value means "default".
type source struct {
	path   []string // dotted JSON path into the value
	header string
	name   string // as written in config, for error messages
}

func (s source) isZero() bool { return s.path == nil && s.header == "" }

// CompileRoute parses a validated config route.
func CompileRoute(r config.Route) (*Route, error) {
	out := &Route{Name: r.Name, Topic: r.Topic, Kind: r.Kind, Queue: r.Queue, Ordered: r.Ordered, Coalesce: r.CoalesceLatest(),
		MaxAttempts: r.MaxAttempts, TTL: r.TTL.D(), MaxRecordBytes: r.MaxRecordBytes, DLQMaxBytes: r.DLQLimit(),
		Delay: r.Delay.D()}
	if r.Ordered {
		out.Lane = &pgstore.LanePolicy{Policy: "none", OnDead: r.OnDead, GapTimeout: r.GapTimeout.D(), GapPolicy: r.GapPolicy}
		if r.Version != nil {
			out.Lane.Policy = r.Version.Policy
		}
	}
	var err error
	if out.key, err = compileSource(r.Key); err != nil {
		return nil, fmt.Errorf("route %s: key: %w", r.Name, err)
	}
	if out.dedupe, err = compileSource(r.Dedupe); err != nil {
		return nil, fmt.Errorf("route %s: dedupe: %w", r.Name, err)
	}
	if r.Version != nil {
		if out.version, err = compileSource(r.Version.FieldRef); err != nil {
			return nil, fmt.Errorf("route %s: version: %w", r.Name, err)
		}
	}
	if out.runAt, err = compileSource(r.RunAt); err != nil {
		return nil, fmt.Errorf("route %s: run_at: %w", r.Name, err)
	}
	out.Limited = r.MaxRunning > 0 || r.Group != nil || r.RateLimit != nil
	if r.Group != nil {
		if out.group, err = compileSource(r.Group.FieldRef); err != nil {
			return nil, fmt.Errorf("route %s: group: %w", r.Name, err)
		}
	}
	if fl := r.Filter; fl != nil {
		src, err := compileSource(fl.FieldRef)
		if err != nil {
			return nil, fmt.Errorf("route %s: filter: %w", r.Name, err)
		}
		out.filter = &filter{source: src, in: map[string]bool{}}
		for _, v := range fl.In {
			out.filter.in[v] = true
		}
	}
	return out, nil
}

// Takes reports whether the route's filter takes rec: always without a
// filter; else when the filter's field or header reads one of its
// values. A record the filter cannot read (the value missing, not JSON,
// not a scalar) is not taken: a filter selects, it does not judge.
func (r *Route) Takes(rec *kgo.Record) bool {
	f := r.filter
	if f == nil {
		return true
	}
	if f.path != nil && !validJSON(rec.Value) {
		return false
	}
	v, p := f.text(rec, partValue)
	return p == nil && f.in[v]
}

func compileSource(f config.FieldRef) (source, error) {
	switch {
	case f.Field != "":
		p, err := config.ParseFieldPath(f.Field)
		if err != nil {
			return source{}, err
		}
		return source{path: p, name: "field " + f.Field}, nil
	case f.Header != "":
		return source{header: f.Header, name: "header " + f.Header}, nil
	}
	return source{}, nil
}

// problem is why a record cannot become a job: a DLQ reason, the part
// of the record at fault, and what is wrong with it.
type problem struct {
	reason string
	part   part
	msg    string
}

// part names what a problem is about, so that the API can name the
// request field that carried it.
type part int

const (
	partValue part = iota
	partKey
	partDedupe
	partVersion
	partGroup
	partRunAt
)

func (p part) String() string {
	return [...]string{"value", "key", "dedupe", "version", "group", "run_at"}[p]
}

func problemf(reason string, p part, format string, args ...any) *problem {
	return &problem{reason: reason, part: p, msg: fmt.Sprintf(format, args...)}
}

// given holds values that a caller supplies instead of reading them from
// the record: the API's Switchyard-Key, Switchyard-Version,
// Idempotency-Key and Switchyard-Run-At or Switchyard-Delay. Nil pointers
// leave the route's own source in charge.
type given struct {
	key     *string
	version *int64
	dedupe  *string
	runAt   *time.Time
}

// Decode turns one record into a job row, or into a poison entry that says
// why it cannot be one. It never fails otherwise: every record ends as
// exactly one of the two, so the partition always moves on (I6).
func (r *Route) Decode(rec *kgo.Record, now time.Time) (*pgstore.NewJob, *pgstore.Poison) {
	j, p := r.decode(rec, now, given{})
	if p != nil {
		return nil, r.park(rec, p)
	}
	return j, nil
}

// Decoded counts what decodeInto made of a topic's records.
type Decoded struct {
	Jobs, Poison int // one per record and route that takes it
	Filtered     int // records no route took
}

// decodeInto decodes records of one topic through its routes into a
// batch: each record becomes, for every route that takes it, a job or a
// poison entry of that route (I6, per route), and a record that no route
// takes is only counted. The one decoding path of the consumer and of
// replay.
func decodeInto(b *pgstore.IngestBatch, routes []*Route, recs []*kgo.Record, now time.Time) Decoded {
	var n Decoded
	for _, rec := range recs {
		taken := false
		for _, r := range routes {
			if !r.Takes(rec) {
				continue
			}
			taken = true
			if job, p := r.Decode(rec, now); job != nil {
				b.Jobs = append(b.Jobs, *job)
				n.Jobs++
			} else {
				b.Poison = append(b.Poison, *p)
				n.Poison++
			}
		}
		if !taken {
			n.Filtered++
		}
	}
	return n
}

func (r *Route) decode(rec *kgo.Record, now time.Time, in given) (*pgstore.NewJob, *problem) {
	if size := recordSize(rec); size > r.MaxRecordBytes {
		return nil, problemf(ReasonTooLarge, partValue, "record is %d bytes, over max_record_bytes %d", size, r.MaxRecordBytes)
	}
	if (in.key == nil && r.key.path != nil) || (in.dedupe == nil && r.dedupe.path != nil) ||
		(in.version == nil && r.version.path != nil) || r.group.path != nil || (in.runAt == nil && r.runAt.path != nil) {
		// The whole value must be JSON; the fields are then read from the
		// bytes without building the document, which cost 5 to 7 times
		// as much (bench --scale --only payload).
		if !validJSON(rec.Value) {
			return nil, problemf(ReasonDecode, partValue, "value is not JSON: %s", notJSON(rec.Value))
		}
	}
	hk, hv := headers(rec)
	j := &pgstore.NewJob{Route: r.Name, Kind: r.Kind, Queue: r.Queue, Payload: nonNilBytes(rec.Value),
		HeaderKeys: hk, HeaderVals: hv, MaxAttempts: r.MaxAttempts, Lane: r.Lane, Coalesce: r.Coalesce, RecordKey: rec.Key,
		Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset}
	if !rec.Timestamp.IsZero() {
		at := rec.Timestamp
		j.RecordAt = &at
	}

	switch {
	case in.key != nil:
		j.Key = *in.key
	case r.key.isZero():
		if rec.Key == nil && r.Ordered {
			return nil, problemf(ReasonMissingField, partKey, "record has no key and the route is ordered")
		}
		j.Key = string(rec.Key)
	default:
		v, p := r.key.text(rec, partKey)
		if p != nil {
			return nil, p
		}
		j.Key = v
	}
	if p := checkKey("key", j.Key, partKey); p != nil {
		return nil, p
	}

	switch {
	case in.dedupe != nil:
		j.DedupeKey = *in.dedupe
	case r.dedupe.isZero():
		j.DedupeKey = fmt.Sprintf("%s/%d/%d", rec.Topic, rec.Partition, rec.Offset)
	default:
		v, p := r.dedupe.text(rec, partDedupe)
		if p != nil {
			return nil, p
		}
		if p := checkKey("dedupe key", v, partDedupe); p != nil {
			return nil, p
		}
		j.DedupeKey = v
	}

	switch {
	case in.version != nil:
		j.Version = in.version
	case !r.version.isZero():
		v, p := r.version.text(rec, partVersion)
		if p != nil {
			return nil, p
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, problemf(ReasonDecode, partVersion, "version: %q is not an integer", v)
		}
		j.Version = &n
	}
	switch {
	case !r.group.isZero():
		v, p := r.group.text(rec, partGroup)
		if p != nil {
			return nil, p
		}
		if p := checkKey("group value", v, partGroup); p != nil {
			return nil, p
		}
		j.Group = v
	case r.Limited:
		j.Group = pgstore.GroupAll
	}
	start := now
	switch at, p := r.runTime(rec, in, now); {
	case p != nil:
		return nil, p
	case at.After(now):
		j.RunAt, start = &at, at
	}
	if r.TTL > 0 {
		d := start.Add(r.TTL)
		j.Deadline = &d
	}
	return j, nil
}

// maxRunAhead bounds how far ahead a job may be set to run: further is
// surely a unit mistake (seconds read as milliseconds run in 1970, but
// microseconds read as milliseconds run in the year 50,000).
const maxRunAhead = 100 * 365 * 24 * time.Hour

// runTime is when a record's job may run first: given (the API's
// headers), else the route's run_at (RFC 3339, or integer Unix
// milliseconds), else its timestamp plus the route's delay; a time not
// after now means now. A record without a run_at value runs now.
func (r *Route) runTime(rec *kgo.Record, in given, now time.Time) (time.Time, *problem) {
	switch {
	case in.runAt != nil:
		return *in.runAt, nil
	case !r.runAt.isZero():
		v, p := r.runAt.text(rec, partRunAt)
		if p != nil && p.reason == ReasonMissingField {
			return now, nil
		}
		if p != nil {
			return time.Time{}, p
		}
		at, err := ParseRunAt(v)
		if err != nil {
			return time.Time{}, problemf(ReasonDecode, partRunAt, "run_at: %v", err)
		}
		if at.Sub(now) > maxRunAhead {
			return time.Time{}, problemf(ReasonDecode, partRunAt, "run_at: %s is more than 100 years away", at.Format(time.RFC3339))
		}
		return at, nil
	case r.Delay > 0:
		from := rec.Timestamp
		if from.IsZero() {
			from = now
		}
		return from.Add(r.Delay), nil
	}
	return now, nil
}

// ParseRunAt reads a run time: RFC 3339 (with or without fractional
// seconds), or integer Unix milliseconds. 0 is the epoch (at once). A
// positive integer below minRunAtMillis is refused rather than read as a
// moment of 1970: it is Unix seconds, a classic slip, and the job would
// run at once instead of when it was meant to.
func ParseRunAt(v string) (time.Time, error) {
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
		if ms < 0 || (ms > 0 && ms < minRunAtMillis) {
			return time.Time{}, fmt.Errorf("%d is not Unix milliseconds of a time since 1973: give milliseconds (%d000 if it is seconds) or RFC 3339", ms, ms)
		}
		return time.UnixMilli(ms), nil
	}
	at, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor integer Unix milliseconds", v)
	}
	return at, nil
}

// minRunAtMillis is 1973-03-03 in Unix milliseconds, and, read as
// seconds, a time some 1,200 years ahead: an integer run time below it
// was written in seconds.
const minRunAtMillis = 100_000_000_000

// checkKey is what a key or dedupe key must be to be stored and compared
// exactly: text Postgres can hold (valid UTF-8, no NUL: invalid bytes are
// never rewritten, or two distinct keys could become one), and short
// enough for its index entries (pgstore.MaxKeyBytes).
func checkKey(what, v string, p part) *problem {
	if !validText(v) {
		if utf8.ValidString(v) { // valid UTF-8, yet no text Postgres can hold
			return problemf(ReasonDecode, p, "%s holds a NUL byte, which Postgres text cannot store", what)
		}
		return problemf(ReasonDecode, p, "%s is not valid UTF-8 text", what)
	}
	if len(v) > pgstore.MaxKeyBytes {
		return problemf(ReasonTooLarge, p, "%s is %d bytes, over the %d-byte limit of keys", what, len(v), pgstore.MaxKeyBytes)
	}
	return nil
}

// park makes the DLQ entry of a record with a problem. A too_large
// record keeps at most DLQMaxBytes of itself — its key, then whole
// headers, then a prefix of its value, while they fit — and its
// position, from which a re-drive reads it again.
func (r *Route) park(rec *kgo.Record, p *problem) *pgstore.Poison {
	hk, hv := headers(rec)
	ps := &pgstore.Poison{Reason: p.reason, Route: r.Name, Queue: r.Queue, Error: p.msg,
		Payload: nonNilBytes(rec.Value), HeaderKeys: hk, HeaderVals: hv, RecordKey: rec.Key,
		Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset}
	size := recordSize(rec)
	if p.reason != ReasonTooLarge || size <= r.DLQMaxBytes {
		return ps
	}
	ps.Truncated, ps.RecordBytes = true, size
	budget := r.DLQMaxBytes
	if len(rec.Key) > budget {
		ps.RecordKey = nil
	} else {
		budget -= len(rec.Key)
	}
	ps.HeaderKeys, ps.HeaderVals = []string{}, [][]byte{}
	for i := range hk {
		if n := len(hk[i]) + len(hv[i]); n <= budget {
			ps.HeaderKeys, ps.HeaderVals = append(ps.HeaderKeys, hk[i]), append(ps.HeaderVals, hv[i])
			budget -= n
		}
	}
	ps.Payload = ps.Payload[:min(len(ps.Payload), budget)]
	return ps
}

// text extracts a scalar of a value already checked to be JSON as text.
// Strings are taken as they are; numbers in their JSON spelling, so 42
// and 42.0 are different keys, as they are different bytes on the wire.
func (s source) text(rec *kgo.Record, p part) (string, *problem) {
	if s.header != "" {
		for _, h := range rec.Headers {
			if h.Key == s.header {
				return string(h.Value), nil
			}
		}
		return "", problemf(ReasonMissingField, p, "%s: %s is missing", p, s.name)
	}
	v, ok := lookup(rec.Value, s.path)
	if !ok || v.Type == gjson.Null {
		return "", problemf(ReasonMissingField, p, "%s: %s is missing", p, s.name)
	}
	switch {
	case v.Type == gjson.String:
		if v.Str == "" {
			return "", problemf(ReasonMissingField, p, "%s: %s is empty", p, s.name)
		}
		// Bytes that are not UTF-8, and escaped lone surrogates, have no
		// exact text: "\xff" and "\xfe" would both read as "\uFFFD" and
		// be one key. Only a string that holds U+FFFD (or invalid bytes)
		// needs its spelling in the record checked.
		if (strings.ContainsRune(v.Str, utf8.RuneError) || !utf8.ValidString(v.Str)) && !exactString(v.Raw) {
			return "", problemf(ReasonDecode, p, "%s: %s is not valid UTF-8 text", p, s.name)
		}
		return v.Str, nil
	case v.Type == gjson.Number, v.Type == gjson.True, v.Type == gjson.False:
		return v.Raw, nil
	case v.IsArray():
		return "", problemf(ReasonDecode, p, "%s: %s is an array, want a string or number", p, s.name)
	default:
		return "", problemf(ReasonDecode, p, "%s: %s is an object, want a string or number", p, s.name)
	}
}

// exactString reports whether a JSON string literal decodes without
// replacement: its bytes are UTF-8 and its \u escapes name no lone
// surrogate.
func exactString(raw string) bool {
	s := strings.TrimSpace(raw)
	if len(s) < 2 || s[0] != '"' || !utf8.ValidString(s) {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		if s[i] != '\\' {
			continue
		}
		i++
		if s[i] != 'u' {
			continue
		}
		r, ok := hex4(s[i+1:])
		if !ok {
			return false
		}
		i += 4
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return false // a low surrogate with no high one before it
		case r >= 0xD800 && r <= 0xDBFF:
			if i+6 >= len(s) || s[i+1] != '\\' || s[i+2] != 'u' {
				return false
			}
			lo, ok := hex4(s[i+3:])
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return false
			}
			i += 6
		}
	}
	return true
}

// notJSON says why a value json.Valid refused is not JSON, as decoding it
// does: the poison entry names the offset and the problem.
func notJSON(value []byte) string {
	d := json.NewDecoder(bytes.NewReader(value))
	d.UseNumber() // a number out of float64's range is still JSON
	var v any
	if err := d.Decode(&v); err != nil {
		return err.Error()
	}
	return "trailing data after the first value"
}

func hex4(s string) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(s[:4], 16, 16)
	return rune(n), err == nil
}

func recordSize(rec *kgo.Record) int {
	n := len(rec.Key) + len(rec.Value)
	for _, h := range rec.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// validText reports whether s can be stored as Postgres text: valid UTF-8
// and no NUL byte. A key that cannot be stored would fail the whole
// batch's transaction and block the partition, so it is poison instead.
func validText(s string) bool {
	return utf8.ValidString(s) && !strings.Contains(s, "\x00")
}

// headers splits record headers into parallel arrays. Header names that
// Postgres text cannot hold are made storable rather than failing the
// batch (a name is shown and forwarded, never compared for identity);
// values are bytes and kept exactly.
func headers(rec *kgo.Record) ([]string, [][]byte) {
	if len(rec.Headers) == 0 {
		return []string{}, [][]byte{}
	}
	keys := make([]string, len(rec.Headers))
	vals := make([][]byte, len(rec.Headers))
	for i, h := range rec.Headers {
		k := h.Key
		if !validText(k) {
			k = strings.ToValidUTF8(strings.ReplaceAll(k, "\x00", ""), "\uFFFD")
		}
		keys[i], vals[i] = k, nonNilBytes(h.Value)
	}
	return keys, vals
}

func nonNilBytes(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
