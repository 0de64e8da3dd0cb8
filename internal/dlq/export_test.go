package dlq

import (
	"context"

	"github.com/switchyard-dev/switchyard/internal/bulk"
)

// RedriveMany is a bulk re-drive's chunk (redriveMany), for tests.
func (s *Service) RedriveMany(ctx context.Context, ids []int64, by string) ([]bulk.Failure, []int64, error) {
	return s.redriveMany(ctx, ids, by)
}
