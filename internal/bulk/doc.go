// Package bulk runs one operator action (re-drive, discard, cancel) over
// every item a filter matched when the action started: the DLQ's entries,
// a queue's jobs.
//
// The promises are the same whatever the action: it takes the items that
// matched when it started and never those that match later (a re-drive's
// own jobs that die again are parked anew, and would otherwise be chased
// for as long as their target stays broken); with an expected count it
// takes none unless that many match (the count a person confirmed); each
// chunk of items (Chunk) is one transaction, so a stopped action leaves
// every item either acted on or as it was, and the same action again
// takes the rest; and it stops only between two chunks, so its count is
// exact.
//
// An action takes a chunk's items in one transaction where the action
// stays within the item (a job of no lane, a lane's waiting job, a DLQ
// entry and its job unless that heads its lane), and the chunk's other
// items each alone after it (Chunked): a lane's head moves its lane, whose
// lock a transaction holding many jobs must not wait for, and a parked
// record is decoded again in Go. A chunk
// that fails as a whole is taken again one item at a time, so that each
// failure names its item and the chunk's other items are acted on.
//
// Items are taken in id order, except that a source may name some to take
// first (Source.First): a cancel takes lanes' waiting jobs before their
// heads, whose cancels would otherwise promote them, one by one, to be
// started and then met as heads.
package bulk
