package main

import (
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/switchyard-dev/switchyard/config"
)

// envOverride is an environment variable that replaced a value the
// config file set. It names the two, never the values: either may be a
// secret.
type envOverride struct{ variable, field string }

// envOverrides lists the variables of env that override a value set in
// the file at path to something else, in the order config.Load applies
// them. A variable that repeats the file's value overrides nothing and is
// not listed. The file already loaded; were it unreadable now, there is
// nothing to say.
func envOverrides(path string, env func(string) string) []envOverride {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	// The file's own values: the same structs, without the environment.
	var file config.Config
	if err := yaml.Unmarshal(data, &file); err != nil {
		return nil
	}
	var out []envOverride
	check := func(variable, field, fileValue, envValue string) {
		if fileValue != "" && envValue != "" && fileValue != envValue {
			out = append(out, envOverride{variable, field})
		}
	}
	check(config.EnvDatabaseURL, "postgres.url", file.Postgres.URL, strings.TrimSpace(env(config.EnvDatabaseURL)))
	var brokers []string
	for b := range strings.SplitSeq(env(config.EnvKafkaBrokers), ",") {
		if b = strings.TrimSpace(b); b != "" {
			brokers = append(brokers, b)
		}
	}
	if len(file.Kafka.Brokers) > 0 && len(brokers) > 0 && !slices.Equal(file.Kafka.Brokers, brokers) {
		out = append(out, envOverride{config.EnvKafkaBrokers, "kafka.brokers"})
	}
	check(config.EnvKafkaInstanceID, "kafka.instance_id", file.Kafka.InstanceID, strings.TrimSpace(env(config.EnvKafkaInstanceID)))
	if file.Kafka.SASL != nil {
		check(config.EnvKafkaSASLPassword, "kafka.sasl.password", file.Kafka.SASL.Password, env(config.EnvKafkaSASLPassword))
	}
	check(config.EnvAdminToken, "http.token", file.HTTP.Token, strings.TrimSpace(env(config.EnvAdminToken)))
	return out
}
