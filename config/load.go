package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The environment variables that override the file. Secrets can then stay
// out of the file entirely.
const (
	EnvDatabaseURL  = "SWITCHYARD_DATABASE_URL"
	EnvKafkaBrokers = "SWITCHYARD_KAFKA_BROKERS"
	EnvAdminToken   = "SWITCHYARD_ADMIN_TOKEN"
	// EnvKafkaSASLPassword applies when the file has a kafka.sasl block.
	EnvKafkaSASLPassword = "SWITCHYARD_KAFKA_SASL_PASSWORD"
	// EnvKafkaInstanceID is per process, so it rarely belongs in a shared file.
	EnvKafkaInstanceID = "SWITCHYARD_KAFKA_INSTANCE_ID"
)

// Load reads the YAML file at path (none when path is ""), applies the
// environment overrides read through env (os.Getenv in production; nil
// means an empty environment), fills defaults and validates. Every problem
// found is in the error, which names the file.
func Load(path string, env func(string) string) (*Config, error) {
	var data []byte
	if path != "" {
		var err error
		if data, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("config: %w", err) // *fs.PathError names the file
		}
	}
	return parse(path, data, env)
}

// Parse is Load for a file already in memory.
func Parse(data []byte, env func(string) string) (*Config, error) {
	return parse("", data, env)
}

func parse(source string, data []byte, env func(string) string) (*Config, error) {
	cfg := new(Config)
	doc, errs := decode(data, cfg)
	if len(errs) > 0 {
		return nil, &loadError{source: source, errs: errs}
	}
	fromEnv, err := applyEnv(cfg, env)
	if err != nil {
		return nil, &loadError{source: source, errs: []error{err}}
	}
	var zeros []setZero
	if doc != nil {
		zeros = explicitZeros(doc, cfg)
	}
	cfg.SetDefaults()
	errs = defaultedZeros(zeros, cfg)
	if err := cfg.Validate(); err != nil {
		errs = append(errs, unjoin(err)...)
	}
	if len(errs) > 0 {
		placeErrors(errs, doc, fromEnv)
		blameEnv(errs, fromEnv)
		return nil, &loadError{source: source, errs: errs}
	}
	return cfg, nil
}

// placeErrors gives each field error about a value of the file the line
// of its field, as the decoder's own errors have theirs: a problem in a
// long file is found by its line. A field the file leaves out (a required
// one) gets the line of the nearest setting around it that the file has;
// one the environment set gets none. The errors are then in the file's
// order, those without a line last.
func placeErrors(errs []error, doc *yaml.Node, fromEnv map[string]string) {
	if doc == nil {
		return
	}
	defer slices.SortStableFunc(errs, func(a, b error) int { return cmp.Compare(lineOf(a), lineOf(b)) })
	nodes := index(doc)
	for _, err := range errs {
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Line > 0 || setByEnv(fe.Field, fromEnv) {
			continue
		}
		nearest := ""
		for _, l := range nodes {
			if l.path == "" || len(l.path) <= len(nearest) {
				continue
			}
			if l.path == fe.Field || strings.HasPrefix(fe.Field, l.path+".") || strings.HasPrefix(fe.Field, l.path+"[") {
				nearest, fe.Line = l.path, l.val.Line
				if l.key != nil {
					fe.Line = l.key.Line
				}
			}
		}
	}
}

// lineOf is the line placeErrors gave err, or the largest int for none.
func lineOf(err error) int {
	var fe *FieldError
	if errors.As(err, &fe) && fe.Line > 0 {
		return fe.Line
	}
	return math.MaxInt
}

// setByEnv reports whether field, or a field it is part of, took its
// value from an environment variable.
func setByEnv(field string, fromEnv map[string]string) bool {
	for f := range fromEnv {
		if field == f || strings.HasPrefix(field, f+"[") || strings.HasPrefix(field, f+".") {
			return true
		}
	}
	return false
}

// decode fills cfg from one YAML document and returns the document (nil
// for none). An empty document is an empty config, so that a file of
// comments, or the environment alone, can configure everything.
func decode(data []byte, cfg *Config) (*yaml.Node, []error) {
	// YAML refuses a tab at the start of a line even on an otherwise blank
	// one; a blank file should not fail on invisible characters.
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	switch err := dec.Decode(&doc); {
	case errors.Is(err, io.EOF):
		return nil, nil
	case err != nil:
		return nil, yamlErrors(data, err)
	}
	// A second document would otherwise be silently ignored, and with it
	// whatever the operator meant by it.
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, yamlErrors(data, err)
	default:
		return nil, []error{fmt.Errorf("line %d: a second YAML document; the config is one document", extra.Line)}
	}
	// The node decodes as the file would, unknown keys refused.
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	if err := strict.Decode(cfg); err != nil {
		return nil, yamlErrors(data, err)
	}
	return &doc, nil
}

// applyEnv overrides the file with the environment. It returns, for each
// field it set, the variable that set it, so that a bad value is blamed on
// the variable rather than on a file that does not contain it. Values are
// trimmed because secrets mounted from files often end in a newline.
func applyEnv(cfg *Config, env func(string) string) (map[string]string, error) {
	if env == nil {
		return nil, nil
	}
	fromEnv := map[string]string{}
	if v := strings.TrimSpace(env(EnvDatabaseURL)); v != "" {
		cfg.Postgres.URL = v
		fromEnv["postgres.url"] = EnvDatabaseURL
	}
	if v := strings.TrimSpace(env(EnvKafkaBrokers)); v != "" {
		var brokers []string
		for b := range strings.SplitSeq(v, ",") {
			if b = strings.TrimSpace(b); b != "" {
				brokers = append(brokers, b)
			}
		}
		if len(brokers) == 0 {
			return nil, &FieldError{Field: EnvKafkaBrokers, Msg: "no broker addresses in a comma-separated list"}
		}
		cfg.Kafka.Brokers = brokers
		fromEnv["kafka.brokers"] = EnvKafkaBrokers
	}
	if v := strings.TrimSpace(env(EnvKafkaInstanceID)); v != "" {
		cfg.Kafka.InstanceID = v
		fromEnv["kafka.instance_id"] = EnvKafkaInstanceID
	}
	// A password keeps its spaces, which may be part of it, but not the
	// line end a Secret mounted from a file adds.
	if v := strings.TrimRight(env(EnvKafkaSASLPassword), "\r\n"); v != "" && cfg.Kafka.SASL != nil {
		cfg.Kafka.SASL.Password = v
		fromEnv["kafka.sasl.password"] = EnvKafkaSASLPassword
	}
	if v := strings.TrimSpace(env(EnvAdminToken)); v != "" {
		cfg.HTTP.Token = v
		fromEnv["http.token"] = EnvAdminToken
	}
	for i := range cfg.Admin.Tokens {
		if t := &cfg.Admin.Tokens[i]; t.TokenEnv != "" {
			t.Token = strings.TrimSpace(env(t.TokenEnv))
		}
	}
	return fromEnv, nil
}

// blameEnv notes on each field error about an overridden field which
// variable supplied the value.
func blameEnv(errs []error, fromEnv map[string]string) {
	for _, err := range errs {
		var fe *FieldError
		if !errors.As(err, &fe) {
			continue
		}
		for field, name := range fromEnv {
			if fe.Field == field || strings.HasPrefix(fe.Field, field+"[") {
				fe.Msg += " (set by " + name + ")"
			}
		}
	}
}

// InFile says err, a problem or an errors.Join of them that a check after
// Load found in the config file at path (ServingErrors, say), as Load says
// its own: under the file's name, and one a line when there are several.
func InFile(path string, err error) error {
	if err == nil {
		return nil
	}
	return &loadError{source: path, errs: unjoin(err)}
}

// unjoin lists the errors inside an errors.Join.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// loadError is every problem found in one config source. It prints them one
// per line under the source's name, so that an operator fixes them all in
// one pass rather than one per restart.
type loadError struct {
	source string // file path, "" for bytes
	errs   []error
}

func (e *loadError) Error() string {
	head := "config"
	if e.source != "" {
		head += " " + e.source
	}
	if len(e.errs) == 1 {
		return head + ": " + e.errs[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d problems:", head, len(e.errs))
	for _, err := range e.errs {
		b.WriteString("\n  ")
		b.WriteString(err.Error())
	}
	return b.String()
}

func (e *loadError) Unwrap() []error { return e.errs }
