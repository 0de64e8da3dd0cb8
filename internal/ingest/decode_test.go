package ingest

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/config"
)

func compile(t testing.TB, r config.Route) *Route {
	t.Helper()
	if r.MaxRecordBytes == 0 {
		r.MaxRecordBytes = 64
	}
	if r.DLQMaxBytes == nil {
		r.DLQMaxBytes = new(64 << 10)
	}
	c, err := CompileRoute(r)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestDecode(t *testing.T) {
	t.Parallel()
	field := func(f string) config.FieldRef { return config.FieldRef{Field: f} }
	header := func(h string) config.FieldRef { return config.FieldRef{Header: h} }
	versioned := &config.Version{FieldRef: field("v"), Policy: "newer"}
	for _, tc := range []struct {
		name    string
		route   config.Route
		rec     kgo.Record
		key     string
		dedupe  string
		version int64
		reason  string // poison reason, "" for a job
		errHas  string
	}{
		{name: "defaults: record key, position dedupe", rec: kgo.Record{Key: []byte("k1"), Value: []byte("anything")},
			key: "k1", dedupe: "t/2/7"},
		{name: "nested field key", route: config.Route{Key: field("customer.id")},
			rec: kgo.Record{Value: []byte(`{"customer":{"id":"c9"}}`)}, key: "c9", dedupe: "t/2/7"},
		{name: "number key keeps its spelling", route: config.Route{Key: field("id")},
			rec: kgo.Record{Value: []byte(`{"id":42.0}`)}, key: "42.0", dedupe: "t/2/7"},
		{name: "header dedupe", route: config.Route{Dedupe: header("event-id")},
			rec: kgo.Record{Value: []byte("x"), Headers: []kgo.RecordHeader{{Key: "event-id", Value: []byte("e1")}}}, dedupe: "e1"},
		{name: "version from field", route: config.Route{Ordered: true, Key: field("k"), Version: versioned},
			rec: kgo.Record{Value: []byte(`{"k":"a","v":12}`)}, key: "a", dedupe: "t/2/7", version: 12},
		{name: "not json", route: config.Route{Key: field("id")}, rec: kgo.Record{Value: []byte("{nope")},
			reason: ReasonDecode, errHas: "not JSON"},
		{name: "trailing data", route: config.Route{Key: field("id")}, rec: kgo.Record{Value: []byte(`{"id":"a"} {}`)},
			reason: ReasonDecode, errHas: "trailing"},
		{name: "missing key field", route: config.Route{Key: field("id")}, rec: kgo.Record{Value: []byte(`{}`)},
			reason: ReasonMissingField, errHas: "field id is missing"},
		{name: "null key field", route: config.Route{Key: field("id")}, rec: kgo.Record{Value: []byte(`{"id":null}`)},
			reason: ReasonMissingField, errHas: "missing"},
		{name: "empty key string", route: config.Route{Key: field("id")}, rec: kgo.Record{Value: []byte(`{"id":""}`)},
			reason: ReasonMissingField, errHas: "empty"},
		{name: "object key", route: config.Route{Key: field("id")}, rec: kgo.Record{Value: []byte(`{"id":{"a":1}}`)},
			reason: ReasonDecode, errHas: "object"},
		{name: "path through a scalar", route: config.Route{Key: field("a.b")}, rec: kgo.Record{Value: []byte(`{"a":1}`)},
			reason: ReasonMissingField},
		{name: "ordered without record key", route: config.Route{Ordered: true}, rec: kgo.Record{Value: []byte("x")},
			reason: ReasonMissingField, errHas: "no key"},
		{name: "missing header", route: config.Route{Dedupe: header("event-id")}, rec: kgo.Record{Value: []byte("x")},
			reason: ReasonMissingField, errHas: "header event-id"},
		{name: "missing version", route: config.Route{Ordered: true, Key: field("k"), Version: versioned},
			rec: kgo.Record{Value: []byte(`{"k":"a"}`)}, reason: ReasonMissingField, errHas: "version"},
		{name: "version not an integer", route: config.Route{Ordered: true, Key: field("k"), Version: versioned},
			rec: kgo.Record{Value: []byte(`{"k":"a","v":"1.5"}`)}, reason: ReasonDecode, errHas: "not an integer"},
		{name: "too large", rec: kgo.Record{Value: []byte(strings.Repeat("x", 65))}, reason: ReasonTooLarge, errHas: "65 bytes"},
		{name: "key with NUL", rec: kgo.Record{Key: []byte("a\x00b"), Value: []byte("x")}, reason: ReasonDecode, errHas: "key holds a NUL byte"},
		{name: "key with a byte that is not UTF-8", rec: kgo.Record{Key: []byte("a\xffb"), Value: []byte("x")}, reason: ReasonDecode, errHas: "key is not valid UTF-8"},
		{name: "field key with NUL", route: config.Route{Key: field("id")},
			rec: kgo.Record{Value: []byte(`{"id":"a\u0000b"}`)}, reason: ReasonDecode, errHas: "key holds a NUL byte"},
		{name: "key not UTF-8", rec: kgo.Record{Key: []byte{0xff}, Value: []byte("x")}, reason: ReasonDecode},
		// Keys are index entries: past pgstore.MaxKeyBytes Postgres would
		// refuse the whole batch, so such a record is parked instead.
		{name: "record key too long", route: config.Route{MaxRecordBytes: 20000},
			rec:    kgo.Record{Key: []byte(strings.Repeat("k", 9000)), Value: []byte("x")},
			reason: ReasonTooLarge, errHas: "key is 9000 bytes, over the 1024-byte limit"},
		{name: "key at the limit", route: config.Route{MaxRecordBytes: 20000},
			rec: kgo.Record{Key: []byte(strings.Repeat("k", 1024)), Value: []byte("x")},
			key: strings.Repeat("k", 1024), dedupe: "t/2/7"},
		{name: "field key too long", route: config.Route{MaxRecordBytes: 20000, Key: field("id")},
			rec:    kgo.Record{Value: []byte(`{"id":"` + strings.Repeat("k", 3000) + `"}`)},
			reason: ReasonTooLarge, errHas: "key is 3000 bytes"},
		{name: "dedupe too long", route: config.Route{MaxRecordBytes: 20000, Dedupe: header("id")},
			rec:    kgo.Record{Value: []byte("x"), Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(strings.Repeat("d", 2000))}}},
			reason: ReasonTooLarge, errHas: "dedupe key is 2000 bytes"},
		// encoding/json would read both as U+FFFD and merge two keys.
		{name: "field key with a byte that is not UTF-8", route: config.Route{Key: field("id")},
			rec: kgo.Record{Value: []byte("{\"id\":\"a\xffb\"}")}, reason: ReasonDecode, errHas: "key: field id is not valid UTF-8"},
		{name: "field dedupe with a lone surrogate", route: config.Route{Dedupe: field("id")},
			rec: kgo.Record{Value: []byte(`{"id":"a\ud800b"}`)}, reason: ReasonDecode, errHas: "dedupe: field id is not valid UTF-8"},
		{name: "field key with a low surrogate alone", route: config.Route{Key: field("id")},
			rec: kgo.Record{Value: []byte(`{"id":"\udc00"}`)}, reason: ReasonDecode, errHas: "not valid UTF-8"},
		{name: "field key with a surrogate pair", route: config.Route{Key: field("id")},
			rec: kgo.Record{Value: []byte(`{"id":"\ud83d\ude00"}`)}, key: "\U0001F600", dedupe: "t/2/7"},
		{name: "field key that is U+FFFD itself", route: config.Route{Key: field("id")},
			rec: kgo.Record{Value: []byte(`{"id":"\ufffd \uFFFD �"}`)}, key: "� � �", dedupe: "t/2/7"},
		{name: "nested field key not UTF-8, last duplicate wins", route: config.Route{Key: field("a.id")},
			rec: kgo.Record{Value: []byte("{\"a\":{\"id\":\"ok\",\"id\":\"\xfe\"}}")}, reason: ReasonDecode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.route.Topic = "t"
			rec := tc.rec
			rec.Topic, rec.Partition, rec.Offset = "t", 2, 7
			job, poison := compile(t, tc.route).Decode(&rec, time.Now())
			if tc.reason != "" {
				if poison == nil {
					t.Fatalf("want poison %s, got job %+v", tc.reason, job)
				}
				if poison.Reason != tc.reason || !strings.Contains(poison.Error, tc.errHas) {
					t.Fatalf("poison %s %q, want %s containing %q", poison.Reason, poison.Error, tc.reason, tc.errHas)
				}
				if string(poison.Payload) != string(rec.Value) || poison.Offset != 7 {
					t.Fatalf("poison lost the record: %+v", poison)
				}
				return
			}
			if poison != nil {
				t.Fatalf("unexpected poison %s: %s", poison.Reason, poison.Error)
			}
			if job.Key != tc.key || job.DedupeKey != tc.dedupe {
				t.Fatalf("key %q dedupe %q, want %q %q", job.Key, job.DedupeKey, tc.key, tc.dedupe)
			}
			if tc.version != 0 && (job.Version == nil || *job.Version != tc.version) {
				t.Fatalf("version %v, want %d", job.Version, tc.version)
			}
		})
	}
}

// A too_large record keeps a bounded part of itself in the DLQ: its key,
// then whole headers, then a prefix of its value, within dlq_max_bytes.
func TestTooLargeKeepsABoundedPart(t *testing.T) {
	t.Parallel()
	r := compile(t, config.Route{Topic: "t", MaxRecordBytes: 100, DLQMaxBytes: new(30)})
	rec := &kgo.Record{Topic: "t", Partition: 1, Offset: 9, Key: []byte("kkkk"), Value: []byte(strings.Repeat("v", 200)),
		Headers: []kgo.RecordHeader{{Key: "big", Value: []byte(strings.Repeat("h", 40))}, {Key: "a", Value: []byte("bc")}}}
	_, p := r.Decode(rec, time.Now())
	if p == nil || p.Reason != ReasonTooLarge {
		t.Fatalf("poison %+v, want too_large", p)
	}
	if !p.Truncated || p.RecordBytes != 4+200+3+40+1+2 {
		t.Fatalf("truncated %v record_bytes %d", p.Truncated, p.RecordBytes)
	}
	if string(p.RecordKey) != "kkkk" || len(p.HeaderKeys) != 1 || p.HeaderKeys[0] != "a" || len(p.Payload) != 30-4-3 {
		t.Fatalf("kept key %q headers %v payload %d bytes", p.RecordKey, p.HeaderKeys, len(p.Payload))
	}
	if p.Partition != 1 || p.Offset != 9 {
		t.Fatalf("position %d/%d", p.Partition, p.Offset)
	}
	small := &kgo.Record{Topic: "t", Value: []byte(strings.Repeat("v", 101))}
	if _, p := compile(t, config.Route{Topic: "t", MaxRecordBytes: 100, DLQMaxBytes: new(200)}).Decode(small, time.Now()); p.Truncated || len(p.Payload) != 101 {
		t.Fatalf("a record within dlq_max_bytes is kept whole: %+v", p)
	}
}

// FuzzDecode: every record becomes exactly one of a job or a poison entry
// (I6), and whatever becomes a job can be stored as Postgres text.
func FuzzDecode(f *testing.F) {
	f.Add([]byte("k"), []byte(`{"customer":{"id":"c1"},"event":"e1","v":3}`), "h", []byte("v"))
	f.Add([]byte(nil), []byte(`not json`), "", []byte(nil))
	f.Add([]byte{0xff, 0x00}, []byte(`{"customer":{"id":null}}`), "event", []byte("e\x00"))
	f.Add([]byte("k"), []byte(`{"customer":{"id":1e400},"event":[1],"v":"9"}`), "content-type", []byte{0xc3})
	route := compile(f, config.Route{Topic: "t", Ordered: true, MaxRecordBytes: 512,
		Key:     config.FieldRef{Field: "customer.id"},
		Dedupe:  config.FieldRef{Header: "event"},
		Version: &config.Version{FieldRef: config.FieldRef{Field: "v"}, Policy: "strict"}})
	plain := compile(f, config.Route{Topic: "t", MaxRecordBytes: 512})
	f.Fuzz(func(t *testing.T, key, value []byte, hk string, hv []byte) {
		rec := &kgo.Record{Topic: "t", Key: key, Value: value, Headers: []kgo.RecordHeader{{Key: hk, Value: hv}}}
		for _, r := range []*Route{route, plain} {
			job, poison := r.Decode(rec, time.Now())
			if (job == nil) == (poison == nil) {
				t.Fatalf("want exactly one of job and poison: %v %v", job, poison)
			}
			if job != nil {
				for _, s := range append([]string{job.Key, job.DedupeKey}, job.HeaderKeys...) {
					if !utf8.ValidString(s) || strings.Contains(s, "\x00") {
						t.Fatalf("unstorable text %q", s)
					}
				}
			}
		}
	})
}
