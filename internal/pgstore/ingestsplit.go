package pgstore

// An IngestSplit's halves each hold at least SplitMinJobs jobs or
// SplitMinBytes of payloads. Below that a half's transaction is a few
// milliseconds, and a second one beside it buys little for a second
// connection. The bytes count too because a COPY's cost follows them: a
// poll of large records holds few (the fetch's bytes bound it), and its
// COPY is as long as one of thousands of small ones.
const (
	SplitMinJobs  = 1000
	SplitMinBytes = 1 << 20
)

// splitRowBytes is what a row costs a COPY beside its payload, in bytes
// of payload (its other columns, tuple and index entries), for cutting a
// batch where its halves cost about the same.
const splitRowBytes = 256

// splitMinConns is the smallest pool that IngestSplit splits for: the
// halves take two of its connections at once.
const splitMinConns = 4

// IngestSplit divides a large batch into two that are stored at the same
// time, in two transactions on two connections: a COPY keeps one
// Postgres backend busy, and on a machine with cores to spare two of them
// store a backlog faster (docs/performance.md, "A large poll stored in
// two transactions at once"). ok is false when b is stored whole.
//
// The halves split b's jobs where they cost about the same to store (by
// their payloads' bytes and a fixed cost a row), a record's jobs
// together; the one partition whose records fall on both sides moves to
// the split point in the first half and on from there in the second.
// Each other partition, with its poison entries, goes with the half that
// holds its jobs (the first when it has none). The second half Continues
// the first: it writes its rows beside the first's, then locks its
// partitions' stored offsets, which waits for the first half's
// transaction, and fences them last. Its fence expects the split point,
// which only the first half's commit stores: the second commits only
// after the first, and if the first fails, so does the second's fence,
// and nothing of either is stored. (Should the second reach its fence
// before the first has moved the shared offset at all, a transaction
// start away, it is refused as well, and its records are read again.)
//
// Every wait between the halves is one Postgres sees, so a deadlock with
// a third transaction (a member storing the same partition, whose fence
// holds its offsets while its rows wait for the second half's) is found
// and broken by Postgres, and retried like any failed batch. Even so the
// halves must not wait for each other's locks, which would make that the
// rule rather than the exception. So a batch is stored whole when:
//   - a half would hold fewer than SplitMinJobs jobs and SplitMinBytes of
//     payloads, or it has claims to carry;
//   - a job of it is of an ordered route (its lane rows are locked, by
//     any batch that touches the lane) or of a coalescing one (which
//     updates the key's unstarted jobs);
//   - a dedupe key is in both halves (the dedupe index makes the second
//     insert of a key wait for the first's transaction);
//   - the partition split between the halves has no stored offset yet
//     (the first half inserts its row, which the second cannot lock
//     until it is committed);
//   - more than one partition has records on both sides of the middle,
//     or a partition's records on the two sides are out of offset order;
//   - the pool has fewer than splitMinConns connections.
func (s *Store) IngestSplit(b IngestBatch) (first, second IngestBatch, ok bool) {
	n := len(b.Jobs)
	if n < 2 || len(b.Claims) > 0 || b.Continues || !s.splits {
		return first, second, false
	}
	var total int
	for i := range b.Jobs {
		total += splitRowBytes + len(b.Jobs[i].Payload)
	}
	m, cum := 0, 0 // the cut: the first job past half the batch's cost
	for ; m < n && 2*cum < total; m++ {
		cum += splitRowBytes + len(b.Jobs[m].Payload)
	}
	for m > 0 && m < n && b.Jobs[m-1].recordRoute().sameRecord(b.Jobs[m].recordRoute()) {
		m--
	}
	if !bigEnough(b.Jobs[:m]) || !bigEnough(b.Jobs[m:]) {
		return first, second, false
	}
	type dedupe struct{ route, origin, key string }
	keys := make(map[dedupe]struct{}, m)
	inFirst := map[partition]int64{} // the highest offset of each partition's jobs in the first half
	for i := range b.Jobs[:m] {
		j := &b.Jobs[i]
		if j.Lane != nil || j.Coalesce {
			return first, second, false
		}
		keys[dedupe{j.Route, j.origin(), j.DedupeKey}] = struct{}{}
		inFirst[partition{j.Topic, j.Partition}] = max(inFirst[partition{j.Topic, j.Partition}], j.Offset)
	}
	inSecond := map[partition]int64{} // the lowest offset of each partition's jobs in the second half
	for i := range b.Jobs[m:] {
		j := &b.Jobs[m+i]
		if j.Lane != nil || j.Coalesce {
			return first, second, false
		}
		if _, dup := keys[dedupe{j.Route, j.origin(), j.DedupeKey}]; dup {
			return first, second, false
		}
		p := partition{j.Topic, j.Partition}
		if low, seen := inSecond[p]; !seen || j.Offset < low {
			inSecond[p] = j.Offset
		}
	}
	var shared *partition
	var at int64 // where the shared partition is split
	for p, low := range inSecond {
		high, both := inFirst[p]
		if !both {
			continue
		}
		if shared != nil || high >= low {
			return first, second, false
		}
		shared, at = &p, low
	}

	first = IngestBatch{Group: b.Group, Jobs: b.Jobs[:m:m]}
	second = IngestBatch{Group: b.Group, Jobs: b.Jobs[m:], Continues: true}
	for _, o := range b.Offsets {
		p := partition{o.Topic, o.Partition}
		switch _, later := inSecond[p]; {
		case shared != nil && p == *shared:
			if o.Expected < 0 {
				return IngestBatch{}, IngestBatch{}, false
			}
			first.Offsets = append(first.Offsets, OffsetAdvance{Topic: o.Topic, Partition: o.Partition, Expected: o.Expected, Next: at})
			second.Offsets = append(second.Offsets, OffsetAdvance{Topic: o.Topic, Partition: o.Partition, Expected: at, Next: o.Next})
		case later:
			second.Offsets = append(second.Offsets, o)
		default:
			first.Offsets = append(first.Offsets, o)
		}
	}
	for _, p := range b.Poison {
		_, later := inSecond[partition{p.Topic, p.Partition}]
		if shared != nil && (partition{p.Topic, p.Partition}) == *shared {
			later = p.Offset >= at
		}
		if later {
			second.Poison = append(second.Poison, p)
		} else {
			first.Poison = append(first.Poison, p)
		}
	}
	return first, second, true
}

// bigEnough says whether jobs make a half of an IngestSplit.
func bigEnough(jobs []NewJob) bool {
	if len(jobs) >= SplitMinJobs {
		return true
	}
	var bytes int
	for i := range jobs {
		bytes += len(jobs[i].Payload)
	}
	return bytes >= SplitMinBytes
}

// partition is a topic's partition.
type partition struct {
	topic string
	part  int32
}

// sameRecord says whether two jobs come from the same record.
func (r recordRoute) sameRecord(o recordRoute) bool {
	return r.topic == o.topic && r.partition == o.partition && r.offset == o.offset
}
