package pgstore

import "context"

// The batch statements whose plans TestBatchStatementsJoinByPrimaryKey
// checks.
var (
	CompleteSQL  = completeSQL
	HeartbeatSQL = heartbeatSQL
	ReleaseSQL   = releaseSQL
)

// MigrateTo applies the migrations up to last, for tests of a migration
// on the rows of the ones before it.
func (s *Store) MigrateTo(ctx context.Context, last int) ([]string, error) {
	return s.migrateTo(ctx, last)
}
