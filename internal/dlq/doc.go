// Package dlq owns what happens to parked work: re-drive and discard.
//
// Entries are written elsewhere, always in the same transaction as the
// event that parks them: ingest parks poison records (decode,
// missing_field, too_large) with the stored offset that moves past them
// (I6); dispatch parks dead jobs (permanent, max_attempts) with their
// final state; lanes park gap jobs of strict routes. This package never
// deletes an entry without either turning it back into work or being
// told to discard it, and never re-runs a job outside its lane's order.
//
// A parked record is decoded again here, by its route in the current
// config, and stored as ingest stores a record: a bulk re-drive decodes a
// chunk's records and stores them in transactions bounded in bytes (the
// records its entries keep only in part read again from Kafka together,
// one pass over each partition), and whatever a transaction cannot take
// goes alone, so that each entry's answer is the one it would get on its
// own.
package dlq
