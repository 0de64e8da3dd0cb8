package main

import (
	"fmt"
	"strings"
)

// didYouMean is `; did you mean "jobs"?` for the known name nearest to
// got, or "" when none is near enough to be a typo of it.
func didYouMean(got string, known []string) string {
	if s := nearest(got, known); s != "" {
		return fmt.Sprintf("; did you mean %q?", s)
	}
	return ""
}

// nearest is the known name closest to got by edit distance, when that
// distance is small for the name's length (at most 1 for up to 4
// letters, 2 beyond), or the one name got is a prefix of; "" otherwise.
// Ties go to the first known name.
func nearest(got string, known []string) string {
	got = strings.ToLower(got)
	best, bestD := "", -1
	for _, k := range known {
		d := editDistance(got, k)
		if bestD < 0 || d < bestD {
			best, bestD = k, d
		}
	}
	limit := 2
	if len(got) <= 4 {
		limit = 1
	}
	if bestD >= 0 && bestD <= limit && bestD < len(got) {
		return best
	}
	var prefixed []string
	for _, k := range known {
		if len(got) >= 2 && strings.HasPrefix(k, got) {
			prefixed = append(prefixed, k)
		}
	}
	if len(prefixed) == 1 {
		return prefixed[0]
	}
	return ""
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and transpositions of adjacent letters
// ("lsit" is one edit from "list") each cost 1.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	// d[i][j] is the distance between ra[:i] and rb[:j].
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}
