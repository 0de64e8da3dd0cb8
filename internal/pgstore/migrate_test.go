package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// A schema that a newer binary migrated (here, one migration past this
// binary's latest and functions of its own) is refused by this binary's
// Migrate, which leaves it as it was — it would have put its older
// functions back under the newer fleet — and SchemaCheck says which
// binary is the one to replace.
func TestMigrateLeavesANewerSchemaAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	newer := pgstore.LatestVersion() + 1
	if _, err := s.Pool().Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, 'from_a_newer_binary.sql')`, newer); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE schema_functions SET sha256 = 'newer'`); err != nil {
		t.Fatal(err)
	}
	_, err := s.Migrate(ctx)
	var ns *pgstore.NewerSchemaError
	if !errors.As(err, &ns) || ns.At != newer || ns.Latest != pgstore.LatestVersion() {
		t.Fatalf("Migrate of a newer schema: %v, want a NewerSchemaError at %d", err, newer)
	}
	if n := testenv.Count(t, s, `SELECT count(*) FROM schema_functions WHERE sha256 = 'newer'`); n != 1 {
		t.Fatalf("the refused Migrate replaced the newer binary's functions")
	}
	problem, err := s.SchemaCheck(ctx)
	if err != nil || !strings.Contains(problem, "newer than this binary's") || strings.Contains(problem, "switchyard migrate") {
		t.Fatalf("SchemaCheck of a newer schema: %q (%v), want it named newer, with no migrate to run", problem, err)
	}
}

// functionsRecord is the migration that the current functions.sql came
// with, and the file's hash: TestFunctionsChangeWithAMigration.
const functionsRecord = "testdata/functions.sha256"

// Migrate refuses a newer schema by its migrations (above): a
// functions.sql that changed without one would be put back by an older
// binary of the same migration, under the newer fleet. So a change to the
// file comes with a migration — a comment alone will do — and its hash is
// recorded beside that migration's number here.
func TestFunctionsChangeWithAMigration(t *testing.T) {
	b, err := os.ReadFile(functionsRecord)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%d %s", pgstore.LatestVersion(), pgstore.FunctionsHash())
	got := strings.TrimSpace(string(b))
	switch version, _, _ := strings.Cut(got, " "); {
	case got == want:
	case version == strconv.Itoa(pgstore.LatestVersion()):
		t.Fatalf("functions.sql changed without a migration: add migrations/%04d_<what>.sql (a comment is enough), "+
			"so that an older binary's migrate refuses the schema, then write %q to %s", pgstore.LatestVersion()+1, "<its number> <hash>", functionsRecord)
	default:
		t.Fatalf("a new migration: write %q to %s", want, functionsRecord)
	}
}
