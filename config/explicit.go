package config

import (
	"fmt"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// A zero value means "the default" (SetDefaults), which is right for a
// field the file leaves out and wrong for one it spells out:
// `concurrency: 0` is almost certainly a mistake, and running with 4
// instead hides it. explicitZeros finds the fields a file sets to their
// zero value, so that those SetDefaults then changed can be reported.

// setZero is one field the file sets to its type's zero value.
type setZero struct {
	field string // as Validate names fields: "queues.bulk.concurrency"
	// get reads the field's current value from the config's root.
	get func(root reflect.Value) reflect.Value
}

// explicitZeros walks a decoded document beside the config it decoded
// into, and returns the scalar fields set to their zero value. Nulls
// (`concurrency:`) count as not set.
func explicitZeros(doc *yaml.Node, cfg *Config) []setZero {
	var out []setZero
	identity := func(v reflect.Value) reflect.Value { return v }
	walkZeros(doc, reflect.ValueOf(cfg).Elem(), "", identity, &out)
	return out
}

func walkZeros(n *yaml.Node, v reflect.Value, field string, get func(reflect.Value) reflect.Value, out *[]setZero) {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return
		}
		v, get = v.Elem(), then(get, reflect.Value.Elem)
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 1 {
			walkZeros(n.Content[0], v, field, get, out)
		}
	case yaml.AliasNode:
		walkZeros(n.Alias, v, field, get, out)
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, val := n.Content[i].Value, n.Content[i+1]
			sub := strings.TrimPrefix(field+"."+key, ".")
			switch v.Kind() {
			case reflect.Struct:
				if idx := fieldByTag(v.Type(), key); idx != nil {
					walkZeros(val, v.FieldByIndex(idx), sub, then(get, func(v reflect.Value) reflect.Value { return v.FieldByIndex(idx) }), out)
				}
			case reflect.Map:
				k := reflect.ValueOf(key)
				if mv := v.MapIndex(k); mv.IsValid() {
					walkZeros(val, mv, sub, then(get, func(v reflect.Value) reflect.Value { return v.MapIndex(k) }), out)
				}
			}
		}
	case yaml.SequenceNode:
		if v.Kind() != reflect.Slice {
			return
		}
		for i, item := range n.Content {
			if i < v.Len() {
				walkZeros(item, v.Index(i), fmt.Sprintf("%s[%d]", field, i), then(get, func(v reflect.Value) reflect.Value { return v.Index(i) }), out)
			}
		}
	case yaml.ScalarNode:
		if n.Tag != "!!null" && v.IsZero() {
			*out = append(*out, setZero{field: field, get: get})
		}
	}
}

func then(f, g func(reflect.Value) reflect.Value) func(reflect.Value) reflect.Value {
	return func(v reflect.Value) reflect.Value { return g(f(v)) }
}

// fieldByTag finds the struct field a YAML key decodes into, looking
// through inline fields.
func fieldByTag(t reflect.Type, key string) []int {
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == key {
			return []int{i}
		}
		if name == "" && strings.Contains(opts, "inline") && f.Type.Kind() == reflect.Struct {
			if sub := fieldByTag(f.Type, key); sub != nil {
				return append([]int{i}, sub...)
			}
		}
	}
	return nil
}

// defaultedZeros reports, after SetDefaults, every explicit zero that it
// replaced: the file asked for a value the field does not take.
func defaultedZeros(zeros []setZero, cfg *Config) []error {
	var errs []error
	root := reflect.ValueOf(cfg).Elem()
	for _, z := range zeros {
		v := z.get(root)
		if !v.IsValid() || v.IsZero() {
			continue // zero is a value of this field (max_depth: 0)
		}
		shown := fmt.Sprint(v.Interface())
		if v.Kind() == reflect.String {
			shown = fmt.Sprintf("%q", shown)
		}
		errs = append(errs, &FieldError{Field: z.field, Msg: fmt.Sprintf(
			"set to %s, which this field does not take; leave it out for the default (%s)", zeroText(v), shown)})
	}
	return errs
}

func zeroText(v reflect.Value) string {
	switch v.Interface().(type) {
	case string:
		return `""`
	case Duration:
		return "0s"
	}
	return "0"
}
