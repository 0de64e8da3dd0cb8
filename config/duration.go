package config

import (
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"
)

// UnmarshalYAML accepts a Go duration string ("30s", "1m30s", "0").
//
// Problems are returned as *yaml.TypeError rather than plain errors: the
// decoder collects those and keeps going, so one run reports every bad value
// in the file, each with its line, instead of stopping at the first.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf(
			"line %d: want a duration such as 30s, got %s", n.Line, kindName(n.Kind))}}
	}
	v, err := time.ParseDuration(n.Value)
	switch {
	case err != nil:
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: bad duration %q: %v", n.Line, n.Value, err)}}
	case v < 0:
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: bad duration %q: must not be negative", n.Line, n.Value)}}
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration in the form UnmarshalYAML reads.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// String formats the duration like time.Duration ("1m30s").
func (d Duration) String() string { return time.Duration(d).String() }

// kindName is how error messages describe a YAML node kind to a person.
func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	default:
		return "a value"
	}
}
