package config

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// The yaml package reports problems in terms of Go types ("field foo not
// found in type config.Queue"). These patterns recognise its messages, and
// ours from Duration, so that they can be said in terms of the file.
var (
	reLine     = regexp.MustCompile(`(?s)^line (\d+): (.*)$`)
	reUnknown  = regexp.MustCompile(`(?s)^field (.*) not found in type (\S+)$`)
	reDup      = regexp.MustCompile(`(?s)^mapping key ("(?:[^"\\]|\\.)*") already defined at line (\d+)$`)
	reCannot   = regexp.MustCompile("(?s)^cannot unmarshal (\\S+)(?: `(.*)`)? into (\\S+)$")
	reDuration = regexp.MustCompile(`(?s)^(?:bad duration ("(?:[^"\\]|\\.)*")|want a duration such as 30s, got (.*)$)`)
)

// yamlErrors turns the decoder's error into one error per problem, each
// with its line and, when the node can be found, its field path.
func yamlErrors(data []byte, err error) []error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		// A syntax error: "yaml: line 3: did not find expected key". Errors
		// about the bytes themselves come without a line; find it.
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		if line := badByteLine(data); line > 0 && !reLine.MatchString(msg) {
			msg = fmt.Sprintf("line %d: %s", line, msg)
		}
		return []error{errors.New(msg)}
	}
	// The syntax was fine, so this parse succeeds; the tree is what maps a
	// line back to a field path, which the decoder does not report.
	var root yaml.Node
	_ = yaml.Unmarshal(data, &root)
	nodes := index(&root)
	errs := make([]error, 0, len(te.Errors))
	for _, msg := range te.Errors {
		errs = append(errs, errors.New(explain(msg, nodes)))
	}
	return errs
}

func explain(msg string, nodes []located) string {
	m := reLine.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	line, _ := strconv.Atoi(m[1])
	rest := m[2]
	say := func(field, text string) string {
		if field == "" {
			return fmt.Sprintf("line %d: %s", line, text)
		}
		return fmt.Sprintf("line %d: %s: %s", line, field, text)
	}

	if u := reUnknown.FindStringSubmatch(rest); u != nil {
		field := agreed(nodes, func(l located) bool {
			return l.key != nil && l.key.Line == line && l.key.Value == u[1]
		}, parentOf)
		return say(field, fmt.Sprintf("unknown key %q%s", u[1], knownKeys(u[2])))
	}
	if u := reDup.FindStringSubmatch(rest); u != nil {
		key, _ := strconv.Unquote(u[1])
		field := agreed(nodes, func(l located) bool {
			return l.key != nil && l.key.Line == line && l.key.Value == key
		}, parentOf)
		return say(field, fmt.Sprintf("duplicate key %s (first at line %s)", u[1], u[2]))
	}
	if u := reCannot.FindStringSubmatch(rest); u != nil {
		tag, value, goType := u[1], u[2], u[3]
		kind := yaml.ScalarNode
		switch tag {
		case "!!map":
			kind = yaml.MappingNode
		case "!!seq":
			kind = yaml.SequenceNode
		}
		// The decoder shortens long values to 7 characters and "...".
		prefix := strings.TrimSuffix(value, "...")
		field := agreed(nodes, func(l located) bool {
			return l.val.Line == line && l.val.Kind == kind && strings.HasPrefix(l.val.Value, prefix)
		}, pathOf)
		got := kindName(kind)
		if kind == yaml.ScalarNode {
			got = strconv.Quote(value)
		}
		if goType == "bool" && (strings.EqualFold(value, "true") || strings.EqualFold(value, "false")) {
			// Only a quoted true reaches here: the quotes make it a string.
			got += ", a string: write it without quotes"
		}
		return say(field, fmt.Sprintf("want %s, got %s", want(goType), got))
	}
	if u := reDuration.FindStringSubmatch(rest); u != nil {
		value, _ := strconv.Unquote(u[1])
		// A Duration is always a mapping's value, never a list item, which
		// tells it apart from a list item's mapping opened on the same line.
		field := agreed(nodes, func(l located) bool {
			if l.key == nil || l.val.Line != line {
				return false
			}
			if u[1] != "" {
				return l.val.Kind == yaml.ScalarNode && l.val.Value == value
			}
			return kindName(l.val.Kind) == u[2]
		}, pathOf)
		return say(field, rest)
	}
	return say("", rest)
}

// badByteLine is the line of the first byte that is not UTF-8 or is a
// control character YAML refuses, or 0 if there is none.
func badByteLine(data []byte) int {
	line := 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			return line
		case r == '\n':
			line++
		case unicode.IsControl(r) && r != '\t' && r != '\r' && r != 0x85:
			return line
		}
		i += size
	}
	return 0
}

// want describes a Go type as the kind of YAML value that decodes into it.
func want(goType string) string {
	switch {
	case goType == "int" || goType == "int64":
		return "a whole number"
	case goType == "int32":
		return "a whole number up to 2147483647"
	case goType == "bool":
		return "true or false"
	case goType == "string":
		return "a string"
	case strings.HasPrefix(goType, "[]"):
		return "a list"
	default: // our structs and maps
		return "a mapping"
	}
}

// knownKeys lists the keys a mapping of the named Go type accepts. They are
// read from the struct tags so the list cannot drift from the structs.
func knownKeys(typeName string) string {
	t := findType(reflect.TypeFor[Config](), typeName)
	if t == nil {
		return ""
	}
	return " (known keys: " + strings.Join(yamlKeys(t), ", ") + ")"
}

func findType(t reflect.Type, name string) reflect.Type {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	if t.String() == name {
		return t
	}
	for i := range t.NumField() {
		if found := findType(t.Field(i).Type, name); found != nil {
			return found
		}
	}
	return nil
}

func yamlKeys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case opts == "inline":
			keys = append(keys, yamlKeys(f.Type)...)
		case name != "-" && f.IsExported():
			keys = append(keys, name)
		}
	}
	return keys
}

// located is one node of the document and the field path that reaches it.
type located struct {
	path, parent string     // "queues.bulk.lease", "queues.bulk"
	key          *yaml.Node // nil for a list item or the document's root
	val          *yaml.Node
}

func index(doc *yaml.Node) []located {
	var out []located
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				out = append(out, located{val: c})
				walk(c, "")
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := k.Value
				if path != "" {
					p = path + "." + k.Value
				}
				out = append(out, located{path: p, parent: path, key: k, val: v})
				walk(v, p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				p := fmt.Sprintf("%s[%d]", path, i)
				out = append(out, located{path: p, parent: path, val: c})
				walk(c, p)
			}
		}
	}
	walk(doc, "")
	return out
}

// agreed is what every node that matches agrees on (its path, say), or ""
// when none match or they disagree: a wrong path would mislead more than
// none.
func agreed(nodes []located, match func(located) bool, pick func(located) string) string {
	found, n := "", 0
	for _, l := range nodes {
		if !match(l) {
			continue
		}
		if v := pick(l); n == 0 {
			found = v
		} else if v != found {
			return ""
		}
		n++
	}
	return found
}

func pathOf(l located) string   { return l.path }
func parentOf(l located) string { return l.parent }
