package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ParseFieldPath splits a dotted path into a JSON record value
// ("customer.id") into its keys, outermost first. A key may hold any
// character except the dot and whitespace; there is no escaping. Whitespace
// is refused because in a config file it is nearly always a stray space
// that would make every record "missing the field" and park it.
func ParseFieldPath(s string) ([]string, error) {
	switch {
	case s == "":
		return nil, errors.New("empty field path")
	case !utf8.ValidString(s):
		return nil, fmt.Errorf("field path %q is not valid UTF-8", s)
	case strings.ContainsFunc(s, unicode.IsSpace):
		return nil, fmt.Errorf("field path %q contains whitespace", s)
	}
	keys := strings.Split(s, ".")
	if slices.Contains(keys, "") {
		return nil, fmt.Errorf("field path %q has an empty key (a leading, trailing or doubled dot)", s)
	}
	return keys, nil
}
