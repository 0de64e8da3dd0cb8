package switchyard

import "github.com/switchyard-dev/switchyard/internal/pgstore"

// NewApplierForTest is an Applier over a test's own store, for the lease
// cases an engine does not produce on demand.
func NewApplierForTest(s *pgstore.Store) *Applier {
	e := &Engine{store: s}
	e.opened.Store(true)
	return &Applier{e: e}
}
