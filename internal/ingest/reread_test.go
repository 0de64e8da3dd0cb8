package ingest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// random is n bytes that do not compress.
func random(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// countBuffered counts the records a client buffered from its fetches.
type countBuffered struct{ n atomic.Int64 }

func (c *countBuffered) OnFetchRecordBuffered(*kgo.Record) { c.n.Add(1) }

// One RereadMany answers every offset asked for, whatever the mix: runs
// of consecutive offsets, an offset asked twice, offsets far apart in one
// partition (read by jumping, not through the records between), and
// offsets Kafka no longer has, each saying why: below the log's start
// (retention), at its end or past it, an aborted transaction's record, a
// transaction marker, and a partition that does not exist.
func TestRereadManyAnswersEachOffset(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	topic := testenv.Topic(t, 2)
	// Partition 0: 300 records of 20 KB that do not compress, so that a
	// fetch (1 MiB a partition) holds about fifty of them.
	var recs []*kgo.Record
	for i := range 300 {
		v := fmt.Appendf(nil, "%d:", i)
		recs = append(recs, &kgo.Record{Partition: 0, Key: fmt.Appendf(nil, "k%d", i),
			Value: append(v, random(20_000)...), Headers: []kgo.RecordHeader{{Key: "i", Value: fmt.Appendf(nil, "%d", i)}}})
	}
	testenv.Produce(t, topic, recs...)
	// Partition 1, in transactions: offsets 0-4 committed (marker 5), 6-8
	// aborted (marker 9), 10-11 committed (marker 12).
	produceTx := func(end kgo.TransactionEndTry, from, to int) {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(testenv.Brokers(t)...), kgo.TransactionalID(testenv.Name("tx")),
			kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := from; i < to; i++ {
			if err := cl.ProduceSync(ctx, &kgo.Record{Partition: 1, Value: fmt.Appendf(nil, "tx%d", i)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.EndTransaction(ctx, end); err != nil {
			t.Fatal(err)
		}
	}
	produceTx(kgo.TryCommit, 0, 5)
	produceTx(kgo.TryAbort, 5, 8)
	produceTx(kgo.TryCommit, 8, 10)
	// Retention: partition 0 now starts at offset 2.
	var to kadm.Offsets
	to.Add(kadm.Offset{Topic: topic, Partition: 0, At: 2})
	if resp, err := testenv.Admin(t).DeleteRecords(ctx, to); err != nil || resp.Error() != nil {
		t.Fatalf("delete records: %v %v", err, resp.Error())
	}

	at := func(p int32, o int64) At { return At{Topic: topic, Partition: p, Offset: o} }
	ats := []At{at(0, 250), at(0, 3), at(0, 2), at(0, 4), at(0, 1), at(0, 200), at(0, 3), at(0, 299), at(0, 300), at(0, 5000),
		at(1, 7), at(1, 0), at(1, 11), at(1, 9), at(1, 10), at(2, 0)}
	want := []string{"250", "3", "2", "4", "retention", "200", "3", "299", "ends at offset 300", "ends at offset 300",
		"no committed record at offset 7", "tx0", "tx9", "no committed record at offset 9", "tx8", "does not exist"}
	kopts, err := ClientOpts(config.Kafka{Brokers: testenv.Brokers(t)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	buffered := &countBuffered{}
	got, errs := NewRereader(append(kopts, kgo.WithHooks(buffered))).RereadMany(ctx, ats)
	for i, w := range want {
		rec, err := got[i], errs[i]
		switch {
		case err != nil:
			if !errors.Is(err, ErrRecordGone) || !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: %v, want ErrRecordGone saying %q", ats[i], err, w)
			}
		case rec.Topic != topic || rec.Partition != ats[i].Partition || rec.Offset != ats[i].Offset:
			t.Errorf("%+v: got the record at %s/%d/%d", ats[i], rec.Topic, rec.Partition, rec.Offset)
		case ats[i].Partition == 1:
			if string(rec.Value) != w {
				t.Errorf("%+v: value %q, want %q", ats[i], rec.Value, w)
			}
		default:
			if sent := recs[ats[i].Offset]; !bytes.Equal(rec.Value, sent.Value) || string(rec.Key) != "k"+w ||
				len(rec.Headers) != 1 || string(rec.Headers[0].Value) != w {
				t.Errorf("%+v: key %q, headers %v, value %.10q… (%d bytes); want record %s whole", ats[i], rec.Key, rec.Headers, rec.Value, len(rec.Value), w)
			}
		}
	}
	// Read through, partition 0 would have buffered its 298 records; the
	// jump from offset 4 to 200 leaves out at least the 64 past the first
	// fetches.
	if n := buffered.n.Load(); n > 250 {
		t.Errorf("%d records buffered, want the gap between offsets 4 and 200 jumped", n)
	}
}
