package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/ingest"
)

// headerFlags collects repeated --header k=v flags.
type headerFlags []kgo.RecordHeader

func (h *headerFlags) String() string { return fmt.Sprint(len(*h)) }

func (h *headerFlags) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not key=value", s)
	}
	*h = append(*h, kgo.RecordHeader{Key: k, Value: []byte(v)})
	return nil
}

const produceAbout = `
Writes one record, for demos and tests. Headers reach routes that read
them: a filter {header: event-type, in: [...]}, a key, or run_at.

examples:
  switchyard produce --topic orders --key c42 --header event-type=order.created '{"customer_id":"c42"}'
  switchyard produce --topic emails --header send-at=2026-12-24T18:00:00Z '{"to":"a@example.com"}'
      (for a route with run_at: {header: send-at}: the job waits until then)
  echo '{"id":1}' | switchyard produce --topic orders -`

func runProduce(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cfgPath := newFlags("produce", "produce [--config FILE] --topic T [--key K] [--header k=v]... [--json] VALUE|-", produceAbout, stdout)
	topic := fs.String("topic", "", "`TOPIC` to write to (required)")
	key := fs.String("key", "", "record `KEY`")
	var headers headerFlags
	fs.Var(&headers, "header", "record header `k=v` (repeatable)")
	asJSON := jsonFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *topic == "" {
		return usagef("--topic: required")
	}
	if fs.NArg() != 1 {
		return usagef("want exactly one VALUE argument, or - to read the value from stdin")
	}
	value := []byte(fs.Arg(0))
	if fs.Arg(0) == "-" {
		b, err := io.ReadAll(io.LimitReader(os.Stdin, 64<<20))
		if err != nil {
			return fmt.Errorf("read stdin: %w", err)
		}
		value = b
	}
	kcfg, cfg, err := kafkaConfig(fs, *cfgPath, stderr)
	if err != nil {
		return err
	}
	// A record no route reads is still written (a demo may start the
	// route later), but it is most often a mistyped topic.
	if cfg != nil && len(cfg.RoutesOfTopic(*topic)) == 0 {
		var topics []string
		for _, r := range cfg.Routes {
			if !slices.Contains(topics, r.Topic) {
				topics = append(topics, r.Topic)
			}
		}
		slices.Sort(topics)
		hint := ""
		if s := nearest(*topic, topics); s != "" {
			hint = fmt.Sprintf(" (did you mean %s?)", s)
		}
		fmt.Fprintf(stderr, "switchyard produce: warning: no route of %s reads topic %q%s: the record will wait in Kafka unread. Topics read: %s\n",
			*cfgPath, *topic, hint, strings.Join(topics, ", "))
	}
	opts, err := ingest.ClientOpts(kcfg, nil)
	if err != nil {
		return usageError{err.Error()}
	}
	cl, err := kgo.NewClient(append(opts, kgo.AllowAutoTopicCreation())...)
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	defer cl.Close()
	rec := &kgo.Record{Topic: *topic, Value: value, Headers: headers}
	if *key != "" {
		rec.Key = []byte(*key)
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// A ping fails fast with the real cause (auth, TLS, address) where a
	// produce would only time out.
	if err := cl.Ping(pctx); err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	res := cl.ProduceSync(pctx, rec)
	r, err := res.First()
	if err != nil {
		return fmt.Errorf("produce to %s: %w", *topic, err)
	}
	if *asJSON {
		return printJSON(stdout, map[string]any{"topic": r.Topic, "partition": r.Partition, "offset": r.Offset})
	}
	fmt.Fprintf(stdout, "produced %s/%d/%d\n", r.Topic, r.Partition, r.Offset)
	return nil
}

// kafkaConfig reads the kafka block of the config, and the whole config;
// or the brokers from SWITCHYARD_KAFKA_BROKERS alone when no config file
// is there (the config is then nil).
func kafkaConfig(fs *flag.FlagSet, cfgPath string, stderr io.Writer) (config.Kafka, *config.Config, error) {
	if _, err := os.Stat(cfgPath); !configNamed(fs) && errors.Is(err, os.ErrNotExist) {
		var bs []string
		for _, b := range strings.Split(os.Getenv("SWITCHYARD_KAFKA_BROKERS"), ",") {
			if b = strings.TrimSpace(b); b != "" {
				bs = append(bs, b)
			}
		}
		if len(bs) == 0 {
			return config.Kafka{}, nil, usagef("kafka.brokers: not set: pass --config or set SWITCHYARD_KAFKA_BROKERS")
		}
		return config.Kafka{Brokers: bs, ClientID: "switchyard"}, nil, nil
	}
	cfg, err := loadConfig(fs, cfgPath, false, stderr)
	if err != nil {
		return config.Kafka{}, nil, err
	}
	return cfg.Kafka, cfg, nil
}
