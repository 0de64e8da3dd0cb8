// Package ingest turns Kafka records into job rows (I1, I2, I6).
//
// # One transaction per poll (two for a large one)
//
// Each poll's records become, per partition, job rows (dedupe key: the
// route's field, else topic/partition/offset) and DLQ rows for poison
// (undecodable, missing key/version/dedupe field, over max_record_bytes),
// and every partition's next offset is stored — all in ONE Postgres
// transaction (pgstore.IngestCommit), or, for a poll of thousands of
// records, in two at once (below). Kafka's committed offset follows,
// asynchronously, only so that lag tools keep working: Postgres is the
// source of truth, and a lost Kafka commit loses nothing. So it follows
// at a pace (kafkaCommits): the first store after a quiet spell at
// once, then at most one commit a second carrying the newest offsets,
// rather than a Kafka round trip and a __consumer_offsets append for
// every transaction; a revoked partition's offset is committed before
// the revoke returns, and Stop commits what is left.
//
// A poll holds at most kafka.fetch_max_records records, and what the
// client buffers beside it is one fetch a broker, bounded by
// kafka.fetch_max_bytes (compressed; ClientOpts): the process's memory
// follows those two settings, not the topic's backlog.
//
// # The fence
//
// A partition's stored offset advances only from the value this member
// last saw (UPDATE … WHERE next_offset = expected). After a rebalance, a
// member that still holds an old batch (a zombie) finds the offset moved,
// rolls everything back, and re-seeks to the stored position; it never
// relies on Kafka's generation. On assignment, the fetch position comes
// from Postgres (AdjustFetchOffsetsFn). A partition with no stored offset
// while Kafka has a committed one means the database was lost or
// replaced: the consumer stops with an error instead of silently
// skipping, unless the operator asked for --reset-offsets.
//
// # Rebalances
//
// BlockRebalanceOnPoll keeps a rebalance from revoking a partition between
// a poll and the end of its transaction. The revoke callback waits for the
// Kafka commit in flight and commits the revoked partitions' pending
// offsets itself; the lost callback drops them. So no commit is ever sent
// for a partition this member no longer owns.
//
// # The next poll decoded while a batch is stored
//
// Under a backlog (a poll of aheadMinRecords or more), a poll is taken
// and decoded while the one before it is stored (pollahead.go): the
// transaction waits on Postgres, and the other core decodes the next
// records meanwhile (docs/performance.md, "The next poll decoded while a
// batch is stored"). At a low load a poll taken during each commit only
// made the broker answer more, smaller fetches. The polls are still stored
// one at a time, in poll order, each fenced on the offsets the one
// before it stored, which process reads only when it stores a poll.
//
// The poll taken ahead is held like the one in hand: BlockRebalanceOnPoll
// counts both, and the rebalances are allowed only once nothing polled is
// unstored. A waiting rebalance ends the chain of polls taken ahead
// (OnPartitionsCallbackBlocked), and so does aheadChainMax should that
// signal ever be missed: a rebalance waits for the batch in hand and at
// most the one taken ahead of it, a fraction of a second under a backlog.
//
// The records taken ahead continue each partition's fetch position from
// the batch in hand. So when that batch ends in a re-seek (the fence
// refused it, or it held records of a partition this member has no
// position for), the records taken ahead of the re-sought partitions are
// dropped with it and read again from the stored position; stored, they
// would have moved the position past the records of the refused batch.
// The records taken ahead of a topic whose fetching the batch held (its
// queue reached max_depth) or an operator paused are dropped too, so a
// hold lets in no more than one poll after it, as before.
//
// # A large poll stored in two transactions at once
//
// A COPY keeps one Postgres backend busy. A poll whose halves would each
// hold pgstore.SplitMinJobs jobs or SplitMinBytes of payloads is stored
// in two transactions on two connections at once, where
// pgstore.IngestSplit can divide it: its first half, fenced first as any
// batch, and its second, which writes
// its rows beside the first's and fences its offsets last, after
// locking them, so that it commits only after the first half (a
// partition cut between the halves is stored to the cut by the first and
// on from there by the second). Each half is a transaction with its own
// offsets, so I1 holds for each; what a half stores is recorded
// (committed) as it would be for a poll of its own. Of the halves an
// attempt leaves unstored, the earliest decides what follows: refused by
// the fence, their partitions are re-read; failed, they are tried again
// without a half that committed. (The second half's fence also fails
// whenever the first half failed: it then speaks for nothing.)
// IngestSplit stores a poll whole where the halves could wait for each
// other's locks (lanes, coalescing, a dedupe key on both sides) or the
// cut partition has no stored offset yet. The gain, measured: a sixth
// more records a second under a backlog (docs/performance.md, "A large
// poll stored in two transactions at once").
//
// # Any record moves its partition on (I6)
//
// Decode turns every record, for each route of its topic that takes it,
// into exactly one of a job or a poison entry of that route, whatever its
// bytes; a record no route takes is counted filtered. Either way its
// offset is stored. Keys and dedupe values are compared for identity,
// so they are taken exactly or not at all: a key that is not valid UTF-8
// or holds a NUL is parked, never rewritten — encoding/json would read
// "\xff" and "\xfe" (or an escaped lone surrogate) as the same U+FFFD,
// and two customers' lanes would become one; Decode checks the field's
// own spelling whenever the decoded text holds U+FFFD.
//
// Keys and dedupe values are also index entries (the dedupe index, the
// lanes' primary key, the key index), and Postgres refuses a btree entry
// over about 2.7 kB — one such record failed every ingest transaction of
// the process, for good. Two designs were weighed: index a hash of the
// key and compare the full key on the heap, or cap the key. A hash index
// cannot enforce uniqueness of the full value (a unique index on the hash
// would merge colliding keys, the very loss I2 forbids), it would need
// the lanes' primary key and the lane functions rewritten around it, and
// every lookup would pay for a recheck. Keys are identifiers — customer
// ids, event ids, URLs — and 1 KiB (pgstore.MaxKeyBytes) holds any of
// them with room to spare. So a longer key or dedupe value is parked as
// too_large with the reason, in the same transaction, and the partition
// moves on. The API answers 400 for the same values (InputError names the
// header).
//
// A too_large record keeps at most Route.DLQMaxBytes of itself in its
// DLQ entry (key, whole headers, then a prefix of the value) and its
// position: parking 20 records of 8 MB used to keep 160 MB, and listing
// them took the process to almost 1 GB. Re-driving such an entry reads
// the record again from Kafka while the topic retains it: a bulk
// re-drive's chunk of them together (Rereader.RereadMany), one pass over
// each partition, for a read alone costs a fetch.
//
// As a net for what nobody foresaw, pgstore.IngestCommit bisects a batch
// that Postgres refuses for its data (SQLSTATE classes 22, 23, 54) under
// savepoints until the refused records stand alone, parks those with
// Postgres's message, and commits the rest: k bad records among n cost
// O(k log n) statements, a good batch nothing. FuzzIngest drives random
// keys, values and headers through Decode and the real commit and checks
// that the stored offset always reaches past every record.
//
// # A stuck ingest is visible
//
// A batch that cannot be stored (the database down, or refusing it for a
// reason no record causes) is retried with backoff, 100 ms doubling to
// 5 s, and each attempt is logged and counted in
// switchyard_ingest_errors_total; records are never skipped. Once the
// batch in hand has gone unstored for Config.StuckAfter (30 s), Ready
// fails, and with it /readyz.
//
// # A batch carries its process's next claim
//
// A process that also runs jobs lends its idle workers to the batches it
// stores (Config.Claims, the dispatcher's IngestClaims): a batch that
// commits in one round trip claims runnable jobs of its queues in its
// own transaction (pgstore.IngestClaim), as the pool's claim would, and
// the dispatcher starts them once it commits (Config.Claimed). At low
// load, where a record is a batch of its own, that saves each record a
// claim transaction and the wake-up before it, and the NOTIFY that would
// wake every other process for a job already taken (measured in
// docs/performance.md). A pool lends only after its own claim found the
// queue dry, so under a backlog its larger claims run as before, and the
// offsets, rows and claim commit or roll back together (I1 unchanged).
//
// # Dedupe namespaces
//
// The dedupe index is (route, origin, dedupe key): records of a route
// (origin kafka), the enqueue API (api, keyed by Idempotency-Key) and
// schedules (schedule, keyed by slot) can never match each other's jobs,
// whatever their values read. Before, API keys were stored as "api/<key>"
// beside records' keys, and a record whose dedupe field read "api/k" was
// silently counted as a duplicate of an API job.
//
// # Several routes per topic
//
// A topic's routes (config order) each see every record; Route.Takes
// applies a route's filter, a record becomes one job or poison entry per
// route that takes it, and all of them go into the same batch, so one
// transaction stores them with the partition's offset (I1). The dedupe
// index is per route, so the jobs of one record in two routes never
// collide. The routes share the topic's offsets: one of them held holds
// the topic's fetching (Consumer.ApplyHolds). A lifted hold takes effect
// with the client's next fetch, after the one in flight, which the broker
// holds at most fetchMaxWait when it finds no data.
//
// This package never runs jobs and never writes SQL itself; it decodes
// records (Route.Decode, which always yields exactly one of a job or a
// poison entry) and hands batches to pgstore.
package ingest
