package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/width"
)

// Text for people: aligned tables with relative ages, key: value views,
// payloads decoded. Every verb that prints one prints the admin API's
// JSON instead with --json, for scripts.

// table is a table of text laid out in columns by the cells a terminal
// gives each character: text/tabwriter counts every rune as one, so a key
// in Chinese pushed every column after it aside by its own length.
type table struct {
	w    io.Writer
	rows [][]string
}

// newTable starts an aligned table under the given column headers; end it
// with Flush.
func newTable(w io.Writer, headers ...string) *table {
	return &table{w: w, rows: [][]string{headers}}
}

func row(t *table, cells ...string) {
	for i, c := range cells {
		// A tab or newline inside a cell would break the columns.
		cells[i] = visible(strings.Map(func(r rune) rune {
			if r == '\t' || r == '\n' || r == '\r' {
				return ' '
			}
			return r
		}, c), false)
	}
	t.rows = append(t.rows, cells)
}

// Flush writes the table: each column as wide as its widest cell and two
// spaces, the last cell of a row unpadded.
func (t *table) Flush() error {
	var widths []int
	for _, r := range t.rows {
		for i, c := range r {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], cells(c))
		}
	}
	var b strings.Builder
	for _, r := range t.rows {
		for i, c := range r {
			b.WriteString(c)
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-cells(c)+2))
			}
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(t.w, b.String())
	return err
}

// cells is how many cells of a terminal s takes: two for an East Asian
// wide or fullwidth character, none for a combining mark.
func cells(s string) int {
	n := 0
	for _, r := range s {
		switch {
		case unicode.Is(unicode.Mn, r):
		case width.LookupRune(r).Kind() == width.EastAsianWide, width.LookupRune(r).Kind() == width.EastAsianFullwidth:
			n += 2
		default:
			n++
		}
	}
	return n
}

// visible writes the characters a terminal would act on rather than show
// — control characters (an escape sequence in a record's key or a
// target's error could recolor, retitle or clear the operator's
// terminal) and bidirectional overrides (which reorder what is shown) —
// as Go escapes, \x1b or \u202e; newlines and tabs too unless lines is
// set. Every
// text of a table or detail view passes here: much of it (keys, errors,
// header names) comes from records and targets, not from the operator.
func visible(s string, lines bool) string {
	if strings.IndexFunc(s, func(r rune) bool { return shown(r, lines) != "" }) < 0 {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if e := shown(r, lines); e != "" {
			b.WriteString(e)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// shown is r's escape if visible must escape it, else "".
func shown(r rune, lines bool) string {
	switch {
	case (r == '\n' || r == '\t') && lines:
		return ""
	case r < 0x80 && unicode.IsControl(r):
		return fmt.Sprintf(`\x%02x`, r)
	case unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r):
		return fmt.Sprintf(`\u%04x`, r)
	}
	return ""
}

// ago says how far t is from now, in its largest unit: "12s ago", "3m
// ago", "in 2h"; "just now" within a second; a date beyond 60 days.
func ago(now, t time.Time) string {
	d := now.Sub(t)
	future := d < 0
	if future {
		d = -d
	}
	// Rounded to the unit shown: a job due in 1h59m is "in 2h", not
	// "in 1h".
	in := func(unit time.Duration) int { return int((d + unit/2) / unit) }
	var s string
	switch {
	case d < time.Second:
		return "just now"
	case d < 59500*time.Millisecond:
		s = fmt.Sprintf("%ds", in(time.Second))
	case d < 59*time.Minute+30*time.Second:
		s = fmt.Sprintf("%dm", in(time.Minute))
	case d < 47*time.Hour+30*time.Minute:
		s = fmt.Sprintf("%dh", in(time.Hour))
	case d < 60*24*time.Hour:
		s = fmt.Sprintf("%dd", in(24*time.Hour))
	default:
		return t.Local().Format("2006-01-02")
	}
	if future {
		return "in " + s
	}
	return s + " ago"
}

// agoPtr is ago of an optional time, "-" for none.
func agoPtr(now time.Time, t *time.Time) string {
	if t == nil {
		return "-"
	}
	return ago(now, *t)
}

// stamp is a time for a detail view: absolute, then relative.
func stamp(now, t time.Time) string {
	return t.Local().Format(time.RFC3339) + " (" + ago(now, t) + ")"
}

// clip shortens s to n cells of a terminal with an ellipsis: a table
// cell for a message that may be kilobytes long.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if cells(s) <= n {
		return s
	}
	used := 0
	for i, r := range s {
		if used += cells(string(r)); used > n-1 {
			return s[:i] + "…"
		}
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// kv prints a detail view: one "key: value" line per pair, aligned. A
// multi-line value (a decoded payload) goes under its key, indented.
type kv struct {
	w     io.Writer
	pairs [][2]string
}

func (v *kv) add(key, value string) { v.pairs = append(v.pairs, [2]string{key, value}) }

func (v *kv) flush() error {
	tw := tabwriter.NewWriter(v.w, 0, 0, 1, ' ', 0)
	for _, p := range v.pairs {
		if strings.Contains(p[1], "\n") {
			// The table so far, then the block on its own.
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(v.w, "%s:\n%s\n", visible(p[0], false), indent(visible(strings.TrimRight(p[1], "\n"), true), "  "))
			continue
		}
		fmt.Fprintf(tw, "%s:\t%s\n", visible(p[0], false), visible(p[1], false))
	}
	return tw.Flush()
}

func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}

// hexDumpMax bounds a hex dump: past it, --json has every byte.
const hexDumpMax = 4096

// decodeBytes is a payload (or a result, a key, a header value) as a
// person reads it: JSON pretty-printed, else UTF-8 text as it is, else a
// hex dump. what says which it is, and the size.
func decodeBytes(b []byte) (what, text string) {
	switch {
	case len(b) == 0:
		return "empty", ""
	case json.Valid(b):
		var out bytes.Buffer
		if err := json.Indent(&out, b, "", "  "); err == nil {
			return fmt.Sprintf("JSON, %s", byteCount(len(b))), out.String()
		}
	case isText(b):
		return fmt.Sprintf("text, %s", byteCount(len(b))), string(b)
	}
	dump := b
	if len(dump) > hexDumpMax {
		dump = dump[:hexDumpMax]
	}
	text = hex.Dump(dump)
	if len(b) > len(dump) {
		text += fmt.Sprintf("… %d more bytes (--json has them all, base64)\n", len(b)-len(dump))
	}
	return fmt.Sprintf("binary, %s", byteCount(len(b))), text
}

// isText: valid UTF-8 without control characters other than whitespace.
func isText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if unicode.IsControl(r) && r != '\n' && r != '\t' && r != '\r' {
			return false
		}
	}
	return true
}

// shortBytes is a key or header value on one line: text as it is (quoted
// when it has spaces at its ends), else hex.
func shortBytes(b []byte) string {
	if isText(b) && !strings.ContainsAny(string(b), "\n\r") {
		s := string(b)
		if s == "" || strings.TrimSpace(s) != s {
			return fmt.Sprintf("%q", s)
		}
		return s
	}
	return "0x" + hex.EncodeToString(b)
}

// thousands is n with a comma every three digits: 120,000.
func thousands(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		return "-" + s
	}
	return s
}

func byteCount(n int) string {
	if n == 1 {
		return "1 byte"
	}
	return fmt.Sprintf("%d bytes", n)
}

// nextPageHint tells, on stderr, how to read the page after a cut list:
// the same command with the same flags, and --after the last id shown.
func nextPageHint(w io.Writer, command string, fs *flag.FlagSet, lastID int64) {
	parts := []string{"switchyard", command}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "after" {
			return
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			if f.Value.String() == "true" {
				parts = append(parts, "--"+f.Name)
			}
			return
		}
		parts = append(parts, "--"+f.Name, shellQuote(f.Value.String()))
	})
	parts = append(parts, "--after", fmt.Sprint(lastID))
	fmt.Fprintf(w, "more: %s\n", strings.Join(parts, " "))
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("-_./:=,@%+", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// isTerminal reports whether w is a terminal (a character device that is
// not /dev/null), where progress may be redrawn in place; on a pipe or a
// file it is not.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	if null, err := os.Stat(os.DevNull); err == nil && os.SameFile(fi, null) {
		return false
	}
	return true
}

// listOut is where a listing verb prints: its table or JSON, and on
// stderr the hint to the next page, which repeats its command and flags.
type listOut struct {
	stdout, stderr io.Writer
	json           bool
	fs             *flag.FlagSet
	command        string
}

// printList prints a page of rows read with one more than limit: the
// extra row, left out, says there is a next page, and the hint names the
// last row's id shown. As JSON it is the API's list shape, next the
// cursor to pass as --after ("" on the last page).
func printList[T any](o listOut, rows []T, limit int, id func(T) int64, table func(io.Writer, time.Time, []T) error) error {
	more := len(rows) > limit
	rows = rows[:min(len(rows), limit)]
	var err error
	if o.json {
		next := ""
		if more {
			next = fmt.Sprint(id(rows[len(rows)-1]))
		}
		err = printJSON(o.stdout, map[string]any{"items": nonNilSlice(rows), "next": next})
	} else {
		err = table(o.stdout, time.Now(), rows)
	}
	if more && err == nil {
		nextPageHint(o.stderr, o.command, o.fs, id(rows[len(rows)-1]))
	}
	return err
}

// progressLine redraws one line on a terminal as a long command goes (a
// replay, a bulk DLQ action), in place, for a person watching it.
type progressLine struct {
	w       io.Writer
	started time.Time
	drawn   time.Time
	now     func() time.Time // time.Now; a test's clock
}

// newProgressLine is a progress line on w, or nil when w is no terminal:
// redrawn lines would litter a file or a pipe.
func newProgressLine(w io.Writer) *progressLine {
	if !isTerminal(w) {
		return nil
	}
	return &progressLine{w: w, started: time.Now(), now: time.Now}
}

// draw redraws the line as text says, given the time since the start.
func (p *progressLine) draw(text func(elapsed time.Duration) string) {
	now := p.now()
	// Four redraws a second are plenty to read, and cheap on a slow link.
	if now.Sub(p.drawn) < 250*time.Millisecond {
		return
	}
	p.drawn = now
	// \r back to the start of the line, \x1b[K erases what a longer
	// previous line left.
	fmt.Fprintf(p.w, "\r%s\x1b[K", text(now.Sub(p.started)))
}

// clear erases the line, for the summary that follows.
func (p *progressLine) clear() {
	if !p.drawn.IsZero() {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
}

// pace is what a progress line says of the pace once a second has gone
// by: ", 10,000 records/s, about 6s left", for n things (what) counted
// so far and done of total steps.
func pace(n int64, what string, done, total int64, elapsed time.Duration) string {
	secs := elapsed.Seconds()
	if secs < 1 {
		return ""
	}
	s := fmt.Sprintf(", %s %s/s", thousands(int64(float64(n)/secs)), what)
	if rate := float64(done) / secs; rate > 0 && done < total {
		left := time.Duration(float64(total-done) / rate * float64(time.Second))
		if left < time.Second {
			s += ", under a second left"
		} else {
			s += ", about " + left.Round(time.Second).String() + " left"
		}
	}
	return s
}
