package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
)

// cliActor is who the audit log says took an action through the CLI:
// cli:<the operating-system user>. The CLI talks to Postgres directly,
// holding no admin token to name its caller by.
func cliActor() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = "unknown"
	}
	return "cli:" + name
}

const auditAbout = `
Lists the audit log, newest first: every action taken through the admin
API, the dashboard or this CLI (cancel, redrive, discard, pause, resume,
trigger, enqueue), with who took it (an admin token's name, or
cli:<user>), when, on what, and what it did. Kept for retention.audit
(default 90 days). --before takes the last id of a page to read the next.

examples:
  switchyard audit list
  switchyard audit list --actor oncall --action redrive`

func runAudit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	switch {
	case len(args) == 0:
		return usagef("missing subcommand: audit list")
	case args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help":
		fmt.Fprintln(stdout, "usage: switchyard audit list [--actor A] [--action X] [--target T] [--limit N] [--before ID]\n\n`switchyard audit list --help` for flags.")
		return nil
	case args[0] != "list":
		return usagef("unknown subcommand %q: want list", args[0])
	}
	fs, cfgPath := newFlags("audit list", "audit list [--config FILE] [--actor A] [--action X] [--target T] [--limit N] [--before ID]",
		auditAbout, stderr)
	var f pgstore.AuditFilter
	fs.StringVar(&f.Actor, "actor", "", "only actions of this actor (a token's name, or cli:<user>)")
	fs.StringVar(&f.Action, "action", "", "only this action: cancel, redrive, discard, pause, resume, trigger or enqueue")
	fs.StringVar(&f.Target, "target", "", "only actions on this target, e.g. job/17, dlq/4, queue/bulk, route/orders")
	fs.IntVar(&f.Limit, "limit", 50, "at most this many (1-1000)")
	fs.Int64Var(&f.Before, "before", 0, "start before this entry id")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if f.Limit < 1 || f.Limit > 1000 {
		return usagef("--limit: %d is not between 1 and 1000", f.Limit)
	}
	store, _, err := openStore(ctx, fs, *cfgPath)
	if err != nil {
		return err
	}
	defer store.Close()
	limit := f.Limit
	f.Limit++
	entries, err := store.AuditList(ctx, f)
	if err != nil {
		return err
	}
	next := ""
	if len(entries) > limit {
		entries, next = entries[:limit], strconv.FormatInt(entries[limit-1].ID, 10)
	}
	return printJSON(stdout, map[string]any{"items": nonNilSlice(entries), "next": next})
}
