package dispatch

import (
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/workers"
)

// workerJob is what a handler is handed of a claimed job.
func workerJob(c *pgstore.Claimed) *workers.Job {
	if c == nil {
		return nil
	}
	j := &workers.Job{ID: c.ID, Kind: c.Kind, Queue: c.Queue, Route: c.Route, Key: c.Key, Version: c.Version,
		Attempt: c.Attempt, MaxAttempts: c.MaxAttempts, Token: c.Token, Payload: c.Payload,
		Source:    workers.Source{Topic: c.Source.Topic, Partition: c.Source.Partition, Offset: c.Source.Offset},
		CreatedAt: c.CreatedAt, Ordered: c.Lane, Checkpoint: c.Checkpoint}
	for _, h := range c.Headers {
		j.Headers = append(j.Headers, workers.Header{Key: h.Key, Value: h.Value})
	}
	return j
}
