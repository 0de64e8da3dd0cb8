// Package ordering lets a Go handler make its own writes conditional on
// the job's version and commit them in the same transaction as the job's
// completion (SPEC §8).
//
// The lane guarantees one job per key at a time and (version, offset)
// start order (see package lanes); what it cannot guarantee alone is that
// a handler's write and the job's success land together. Apply closes that
// gap: inside one Postgres transaction it checks that the attempt still
// holds the job (fencing token, I4), checks that the job's version is
// newer than the key's last applied version (newer/strict policies), runs
// the handler's function on the same transaction, and marks the job
// succeeded — which advances the lane's last applied version and promotes
// the next job, by the lanes trigger. A crash anywhere before the commit
// leaves neither the handler's write nor the completion.
//
// Handler tables must live in the same database as Switchyard's schema.
// This package never runs a handler's SQL outside the transaction it
// hands over, and never retries fn by itself: retries are the dispatcher's.
package ordering
