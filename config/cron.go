package config

import (
	"fmt"
	"strconv"
	"strings"
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

// ParseCron checks a five-field cron expression: minute hour day-of-month
// month day-of-week, each field a comma-separated list of *, N, N-M, */S or
// N-M/S within the field's bounds.
//
// Names (MON, JAN), N/S and macros (@daily) are refused rather than guessed
// at: cron dialects disagree on them, and widening the accepted syntax later
// is compatible while narrowing it would break configs.
func ParseCron(expr string) error {
	fields := strings.Fields(expr)
	if len(fields) != 5 {
		return fmt.Errorf("%q has %d fields, want 5: minute hour day-of-month month day-of-week", expr, len(fields))
	}
	for i, field := range fields {
		b := cronFields[i]
		for item := range strings.SplitSeq(field, ",") {
			if err := checkCronItem(item, b.lo, b.hi); err != nil {
				return fmt.Errorf("%s field %q: %v", b.name, field, err)
			}
		}
	}
	return nil
}

func checkCronItem(item string, lo, hi int) error {
	span, step, stepped := strings.Cut(item, "/")
	if stepped {
		if n, err := cronNumber(step); err != nil || n < 1 {
			return fmt.Errorf("step %q must be a number of at least 1", step)
		}
	}
	if span == "*" {
		return nil
	}
	if span == "" {
		return fmt.Errorf("empty item in a list")
	}
	a, b, ranged := strings.Cut(span, "-")
	start, err := cronValue(a, lo, hi)
	if err != nil {
		return err
	}
	if !ranged {
		if stepped {
			return fmt.Errorf("a step needs * or a range, e.g. %d-%d/%s", start, hi, step)
		}
		return nil
	}
	end, err := cronValue(b, lo, hi)
	if err != nil {
		return err
	}
	if start > end {
		return fmt.Errorf("range %q runs backwards", span)
	}
	return nil
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
