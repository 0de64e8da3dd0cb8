// Package workers owns what runs a job attempt: the Handler interface and
// its control-flow errors (Permanent, RetryAfter), the in-process handler
// registry for Go handlers, and HTTPTarget, the SPEC §5 protocol that hands a
// job to a handler written in any language.
//
// It never touches SQL. A handler's outcome is returned as an error and
// recorded by dispatch through the store package; workers only decides what
// the outcome is.
package workers
