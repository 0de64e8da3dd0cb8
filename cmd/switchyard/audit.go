package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"time"

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
trigger, enqueue, retry), with who took it (an admin token's name, or
cli:<user>), when, on what, and what it did. Kept for retention.audit
(default 90 days). When there are more, the last line says how to read
the next (older) page.

examples:
  switchyard audit list
  switchyard audit list --actor oncall --action redrive`

func runAudit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	switch {
	case len(args) == 0:
		return missingSub("audit")
	case args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help":
		fmt.Fprintln(stdout, "usage: switchyard audit list [--actor A] [--action X] [--target T] [--limit N] [--after ID] [--json]\n\n`switchyard audit list --help` for flags.")
		return nil
	case args[0] != "list":
		return unknownSub("audit", args[0])
	}
	fs, cfgPath := newFlags("audit list", "audit list [--config FILE] [--actor A] [--action X] [--target T] [--limit N] [--after ID] [--json]",
		auditAbout, stdout)
	var f pgstore.AuditFilter
	fs.StringVar(&f.Actor, "actor", "", "only actions of this `ACTOR` (a token's name, or cli:<user>)")
	fs.StringVar(&f.Action, "action", "", "only this `ACTION`: "+strings.Join(pgstore.AuditActions, ", "))
	fs.StringVar(&f.Target, "target", "", "only actions on this `TARGET`, e.g. job/17, dlq/4, queue/bulk, route/orders")
	fs.IntVar(&f.Limit, "limit", 50, "at most `N` entries (1-1000)")
	fs.Int64Var(&f.Before, "after", 0, "start after this entry `ID` (the list runs newest first: the older ones)")
	asJSON := jsonFlag(fs)
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if err := checkPage(f.Limit, f.Before); err != nil {
		return err
	}
	if err := checkOneOf("action", "an action", f.Action, pgstore.AuditActions); err != nil {
		return err
	}
	store, _, err := openStore(ctx, fs, *cfgPath, stderr)
	if err != nil {
		return err
	}
	defer store.Close()
	page := f
	page.Limit++
	entries, err := store.AuditList(ctx, page)
	if err != nil {
		return err
	}
	return printList(listOut{stdout, stderr, *asJSON, fs, "audit list"}, entries, f.Limit,
		func(e pgstore.AuditEntry) int64 { return e.ID }, printAudit)
}

// printAudit is the table of audit list.
func printAudit(w io.Writer, now time.Time, entries []pgstore.AuditEntry) error {
	if len(entries) == 0 {
		_, err := fmt.Fprintln(w, "no actions recorded")
		return err
	}
	tw := newTable(w, "ID", "WHEN", "ACTOR", "ACTION", "TARGET", "DETAIL")
	for _, e := range entries {
		row(tw, fmt.Sprint(e.ID), ago(now, e.At), e.Actor, e.Action, e.Target, clip(string(e.Detail), 60))
	}
	return tw.Flush()
}
