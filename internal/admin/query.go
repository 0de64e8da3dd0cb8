package admin

import (
	"errors"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

const (
	defaultLimit = 50
	maxLimit     = 500
)

// listQuery is the validated query string of a list endpoint.
type listQuery struct {
	filters map[string]string // filter name → value; absent or "" means no filter
	limit   int
	after   string // the cursor: a previous page's next, "" for the first page
}

// parseList reads a list endpoint's query string, whose names
// checkParams has already checked: limit and after, and every other
// parameter as a filter. What after holds is the endpoint's to read
// (afterID, or a cursor of its own).
func parseList(r *http.Request) (listQuery, error) {
	q := listQuery{filters: map[string]string{}, limit: defaultLimit}
	for name, vs := range r.URL.Query() {
		v := vs[0]
		// Postgres rejects such text with an error we would have to
		// report as a 500; it is the client's input that is wrong.
		if !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
			return listQuery{}, badRequest(name, "%s must be valid UTF-8 without NUL bytes", name)
		}
		q.filters[name] = v
	}
	if v := q.filters["limit"]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxLimit {
			return listQuery{}, badRequest("limit", "limit must be an integer from 1 to %d", maxLimit)
		}
		q.limit = n
	}
	q.after = q.filters["after"]
	return q, nil
}

// afterID reads the cursor of a list in id order: the id of the previous
// page's last item (idCursor), 0 for the first page.
func (q listQuery) afterID() (int64, error) {
	if q.after == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(q.after, 10, 64)
	if err != nil || n < 0 {
		return 0, badCursor()
	}
	return n, nil
}

// idCursor is the cursor of a list in id order.
func idCursor(id int64) string { return strconv.FormatInt(id, 10) }

func badCursor() error {
	return badRequest("after", "after must be a cursor from a previous page's next")
}

// oneOf checks an enumerated filter against its allow-list.
func oneOf[T ~string](q listQuery, name string, allowed []T) error {
	if v := q.filters[name]; v != "" && !slices.Contains(allowed, T(v)) {
		words := make([]string, len(allowed))
		for i, a := range allowed {
			words[i] = string(a)
		}
		return badRequest(name, "%s must be one of %s", name, strings.Join(words, ", "))
	}
	return nil
}

// pathID parses the {id} path segment.
func pathID(r *http.Request) (int64, error) {
	v := r.PathValue("id")
	id, err := strconv.ParseInt(v, 10, 64)
	switch {
	case errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(v, "-"):
		return 0, badRequest("id", "%s is larger than any id (at most %d)", v, int64(math.MaxInt64))
	case err != nil || id <= 0 || strconv.FormatInt(id, 10) != v:
		// One spelling per id (not +1 or 01): one URL per resource.
		return 0, badRequest("id", "id must be a positive integer, without a sign or leading zeros")
	}
	return id, nil
}
