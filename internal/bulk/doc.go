// Package bulk runs one operator action (re-drive, discard, cancel) over
// every item a filter matched when the action started: the DLQ's entries,
// a queue's jobs.
//
// The promises are the same whatever the action: it takes the items that
// matched when it started and never those that match later (a re-drive's
// own jobs that die again are parked anew, and would otherwise be chased
// for as long as their target stays broken); with an expected count it
// takes none unless that many match (the count a person confirmed); each
// item is its own transaction, so a stopped action leaves every item
// either acted on or as it was, and the same action again takes the
// rest; and it stops only between two items, so its count is exact.
package bulk
