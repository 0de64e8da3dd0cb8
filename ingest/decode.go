package ingest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

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
	Topic          string
	Kind           string
	Queue          string
	Ordered        bool
	MaxAttempts    int
	TTL            time.Duration
	MaxRecordBytes int
	// Lane is the lane policy of an ordered route, nil otherwise.
	Lane *pgstore.LanePolicy

	key, dedupe, version source
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
	out := &Route{Topic: r.Topic, Kind: r.Kind, Queue: r.Queue, Ordered: r.Ordered,
		MaxAttempts: r.MaxAttempts, TTL: r.TTL.D(), MaxRecordBytes: r.MaxRecordBytes}
	if r.Ordered {
		out.Lane = &pgstore.LanePolicy{Policy: "none", OnDead: r.OnDead, GapTimeout: r.GapTimeout.D(), GapPolicy: r.GapPolicy}
		if r.Version != nil {
			out.Lane.Policy = r.Version.Policy
		}
	}
	var err error
	if out.key, err = compileSource(r.Key); err != nil {
		return nil, fmt.Errorf("route %s: key: %w", r.Topic, err)
	}
	if out.dedupe, err = compileSource(r.Dedupe); err != nil {
		return nil, fmt.Errorf("route %s: dedupe: %w", r.Topic, err)
	}
	if r.Version != nil {
		if out.version, err = compileSource(r.Version.FieldRef); err != nil {
			return nil, fmt.Errorf("route %s: version: %w", r.Topic, err)
		}
	}
	return out, nil
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

func (r *Route) needsJSON() bool {
	return r.key.path != nil || r.dedupe.path != nil || r.version.path != nil
}

// Decode turns one record into a job row, or into a poison entry that says
// why it cannot be one. It never fails otherwise: every record ends as
// exactly one of the two, so the partition always moves on (I6).
func (r *Route) Decode(rec *kgo.Record, now time.Time) (*pgstore.NewJob, *pgstore.Poison) {
	hk, hv := headers(rec)
	poison := func(reason, format string, args ...any) (*pgstore.NewJob, *pgstore.Poison) {
		return nil, &pgstore.Poison{Reason: reason, Route: r.Topic, Queue: r.Queue,
			Error: fmt.Sprintf(format, args...), Payload: nonNilBytes(rec.Value), HeaderKeys: hk, HeaderVals: hv,
			Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset}
	}
	if size := recordSize(rec); size > r.MaxRecordBytes {
		return poison(ReasonTooLarge, "record is %d bytes, over max_record_bytes %d", size, r.MaxRecordBytes)
	}
	var doc any
	if r.needsJSON() {
		d := json.NewDecoder(bytes.NewReader(rec.Value))
		d.UseNumber()
		if err := d.Decode(&doc); err != nil {
			return poison(ReasonDecode, "value is not JSON: %v", err)
		}
		if d.More() {
			return poison(ReasonDecode, "value is not JSON: trailing data after the first value")
		}
	}

	j := &pgstore.NewJob{Route: r.Topic, Kind: r.Kind, Queue: r.Queue, Payload: nonNilBytes(rec.Value),
		HeaderKeys: hk, HeaderVals: hv, MaxAttempts: r.MaxAttempts, Lane: r.Lane,
		Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset}

	if r.key.isZero() {
		if rec.Key == nil && r.Ordered {
			return poison(ReasonMissingField, "record has no key and the route is ordered")
		}
		j.Key = string(rec.Key)
	} else {
		v, reason, err := r.key.text(rec, doc)
		if err != nil {
			return poison(reason, "key: %v", err)
		}
		j.Key = v
	}
	if !validText(j.Key) {
		return poison(ReasonDecode, "key is not valid UTF-8 text")
	}

	if r.dedupe.isZero() {
		j.DedupeKey = fmt.Sprintf("%s/%d/%d", rec.Topic, rec.Partition, rec.Offset)
	} else {
		v, reason, err := r.dedupe.text(rec, doc)
		if err != nil {
			return poison(reason, "dedupe: %v", err)
		}
		if !validText(v) {
			return poison(ReasonDecode, "dedupe key is not valid UTF-8 text")
		}
		j.DedupeKey = v
	}

	if !r.version.isZero() {
		v, reason, err := r.version.text(rec, doc)
		if err != nil {
			return poison(reason, "version: %v", err)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return poison(ReasonDecode, "version: %q is not an integer", v)
		}
		j.Version = &n
	}
	if r.TTL > 0 {
		d := now.Add(r.TTL)
		j.Deadline = &d
	}
	return j, nil
}

// text extracts a scalar as text. Strings are taken as they are; numbers
// in their JSON spelling, so 42 and 42.0 are different keys, as they are
// different bytes on the wire.
func (s source) text(rec *kgo.Record, doc any) (string, string, error) {
	if s.header != "" {
		for _, h := range rec.Headers {
			if h.Key == s.header {
				return string(h.Value), "", nil
			}
		}
		return "", ReasonMissingField, fmt.Errorf("%s is missing", s.name)
	}
	v, ok := lookup(doc, s.path)
	if !ok || v == nil {
		return "", ReasonMissingField, fmt.Errorf("%s is missing", s.name)
	}
	switch v := v.(type) {
	case string:
		if v == "" {
			return "", ReasonMissingField, fmt.Errorf("%s is empty", s.name)
		}
		return v, "", nil
	case json.Number:
		return v.String(), "", nil
	case bool:
		return strconv.FormatBool(v), "", nil
	default:
		return "", ReasonDecode, fmt.Errorf("%s is a %s, want a string or number", s.name, jsonKind(v))
	}
}

// lookup walks a dotted path through JSON objects.
func lookup(doc any, path []string) (any, bool) {
	cur := doc
	for _, seg := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[seg]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func jsonKind(v any) string {
	switch v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "array"
	}
	return fmt.Sprintf("%T", v)
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
// batch; values are bytes and kept exactly.
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
