// Package jobstate names the states of a job (SPEC §1): one small type
// that the store, dispatch, the admin API, the CLI and the config share,
// so that a state is spelled, listed and classified in one place.
//
// The jobs table holds the same words (its CHECK constraint); the state
// machine that moves a job between them lives in internal/pgstore.
package jobstate

import (
	"slices"
	"strings"
)

// State is a job's state.
type State string

// The states, in the order a job meets them.
const (
	// Waiting: behind its lane's head.
	Waiting State = "waiting"
	// Queued: runnable from its scheduled time.
	Queued State = "queued"
	// Running: held by a lease.
	Running State = "running"
	// Retrying: runnable again after its backoff.
	Retrying State = "retrying"
	// Succeeded: its handler (or target) succeeded.
	Succeeded State = "succeeded"
	// Dead: parked in the DLQ (permanent failure, attempts used up, gap).
	Dead State = "dead"
	// Cancelled by an operator.
	Cancelled State = "cancelled"
	// Skipped: a stale version, never run.
	Skipped State = "skipped"
	// Expired: not started before its deadline.
	Expired State = "expired"
	// Coalesced: replaced by a newer record of its key before it started
	// (a route's coalesce: latest), never run.
	Coalesced State = "coalesced"
)

// All, Final, Unfinished and Depth are read by the engine itself (Valid, IsFinal, the
// API's filters): read them, never change them.

// All is every state.
var All = []State{Waiting, Queued, Running, Retrying, Succeeded, Dead, Cancelled, Skipped, Expired, Coalesced}

// Final are the states a job does not leave on its own (an operator's
// re-drive or a replay's rerun may still put it back).
var Final = []State{Succeeded, Dead, Cancelled, Skipped, Expired, Coalesced}

// Unfinished are the states a job leaves on its own, all but Final: the
// ones an operator's cancel takes.
var Unfinished = []State{Waiting, Queued, Running, Retrying}

// Depth are the states counted as a queue's depth: the unfinished ones,
// and dead, which waits for an operator.
var Depth = []State{Waiting, Queued, Running, Retrying, Dead}

// Valid reports whether s is a state.
func (s State) Valid() bool { return slices.Contains(All, s) }

// IsFinal reports whether s is one of Final.
func (s State) IsFinal() bool { return slices.Contains(Final, s) }

// Join lists states for messages: "waiting, queued, …".
func Join(states []State) string { return strings.Join(Strings(states), ", ") }

// Strings returns the states' names, in order.
func Strings(states []State) []string {
	words := make([]string, len(states))
	for i, s := range states {
		words[i] = string(s)
	}
	return words
}
