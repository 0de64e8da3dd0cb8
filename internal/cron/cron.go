// Package cron parses five-field cron expressions and finds the minutes
// they name: what config checks a schedule's cron with, and what the
// schedules run on. It knows nothing of jobs.
package cron

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// cronFields are the five fields of a cron expression, in order.
var cronFields = [5]struct {
	name   string
	lo, hi int
}{
	{"minute", 0, 59},
	{"hour", 0, 23},
	{"day-of-month", 1, 31},
	{"month", 1, 12},
	{"day-of-week", 0, 7}, // 0 and 7 are both Sunday
}

// Expr is a compiled five-field cron expression: the set of minutes it
// names, in a time zone given to Next.
type Expr struct {
	fields [5]uint64 // bit n set: value n is in the field's set
	// A restricted day-of-month or day-of-week: when both are, a day
	// matches either (classic cron); when one is *, only the other counts.
	domStar, dowStar bool
}

// Parse compiles a five-field cron expression: minute hour day-of-month
// month day-of-week, each field a comma-separated list of *, N, N-M, */S or
// N-M/S within the field's bounds.
//
// Names (MON, JAN), N/S and macros (@daily) are refused rather than guessed
// at: cron dialects disagree on them, and widening the accepted syntax later
// is compatible while narrowing it would break configs.
func Parse(expr string) (*Expr, error) {
	fields := strings.Fields(expr)
	if len(fields) != 5 {
		return nil, fmt.Errorf("%q has %d fields, want 5: minute hour day-of-month month day-of-week", expr, len(fields))
	}
	c := &Expr{domStar: fields[2] == "*", dowStar: fields[4] == "*"}
	for i, field := range fields {
		b := cronFields[i]
		for item := range strings.SplitSeq(field, ",") {
			set, err := cronItem(item, b.lo, b.hi)
			if err != nil {
				return nil, fmt.Errorf("%s field %q: %v", b.name, field, err)
			}
			c.fields[i] |= set
		}
	}
	if c.fields[4]&(1<<7) != 0 { // 7 is Sunday, as 0 is
		c.fields[4] |= 1
	}
	return c, nil
}

// Next is the first minute strictly after t, in t's location, that the
// expression names; the zero time if none within five years (e.g. 30
// February). A wall-clock minute that a daylight-saving jump skips does
// not occur; one that it repeats occurs once.
func (c *Expr) Next(t time.Time) time.Time {
	loc := t.Location()
	after := wall(t)
	t = t.Truncate(time.Minute).Add(time.Minute)
	limit := t.AddDate(5, 0, 0)
	for t.Before(limit) {
		y, mo, d := t.Date()
		h, mi := t.Hour(), t.Minute()
		switch {
		case !c.has(3, int(mo)):
			t = time.Date(y, mo+1, 1, 0, 0, 0, 0, loc)
		case !c.day(t):
			t = time.Date(y, mo, d+1, 0, 0, 0, 0, loc)
		case !c.has(1, h):
			t = time.Date(y, mo, d, h+1, 0, 0, 0, loc)
			if t.Hour() == h { // a repeated hour (DST ends): move past it
				t = t.Add(time.Hour)
			}
		case !c.has(0, mi) || !wall(t).After(after):
			// The second test: the hour that a DST change repeats comes
			// round again on the wall clock; its minutes have been.
			t = t.Add(time.Minute)
		default:
			return t
		}
	}
	return time.Time{}
}

// wall is t's wall-clock reading, comparable across DST changes.
func wall(t time.Time) time.Time {
	y, mo, d := t.Date()
	return time.Date(y, mo, d, t.Hour(), t.Minute(), 0, 0, time.UTC)
}

func (c *Expr) has(field, v int) bool { return c.fields[field]&(1<<uint(v)) != 0 }

func (c *Expr) day(t time.Time) bool {
	dom, dow := c.has(2, t.Day()), c.has(4, int(t.Weekday()))
	switch {
	case c.domStar && c.dowStar:
		return true
	case c.domStar:
		return dow
	case c.dowStar:
		return dom
	}
	return dom || dow
}

// cronItem is the set of values one list item names.
func cronItem(item string, lo, hi int) (uint64, error) {
	span, step, stepped := strings.Cut(item, "/")
	by := 1
	if stepped {
		n, err := cronNumber(step)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("step %q must be a number of at least 1", step)
		}
		by = n
	}
	if span == "" {
		return 0, fmt.Errorf("empty item in a list")
	}
	start, end := lo, hi
	if span != "*" {
		a, b, ranged := strings.Cut(span, "-")
		var err error
		if start, err = cronValue(a, lo, hi); err != nil {
			return 0, err
		}
		end = start
		if !ranged && stepped {
			return 0, fmt.Errorf("a step needs * or a range, e.g. %d-%d/%s", start, hi, step)
		}
		if ranged {
			if end, err = cronValue(b, lo, hi); err != nil {
				return 0, err
			}
			if start > end {
				return 0, fmt.Errorf("range %q runs backwards", span)
			}
		}
	}
	var set uint64
	for v := start; v <= end; v += by {
		set |= 1 << uint(v)
	}
	return set, nil
}

func cronValue(s string, lo, hi int) (int, error) {
	n, err := cronNumber(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("%d is out of range %d-%d", n, lo, hi)
	}
	return n, nil
}

// cronNumber accepts digits only: strconv.Atoi alone would also take "+5".
func cronNumber(s string) (int, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, strconv.ErrSyntax
	}
	return strconv.Atoi(s)
}
