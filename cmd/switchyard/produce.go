package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
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
	fs, cfgPath := newFlags("produce", "produce [--config FILE] --topic T [--key K] [--header k=v]... VALUE|-", produceAbout, stderr)
	topic := fs.String("topic", "", "topic to write to (required)")
	key := fs.String("key", "", "record key")
	var headers headerFlags
	fs.Var(&headers, "header", "record header k=v (repeatable)")
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
	kcfg, err := kafkaConfig(fs, *cfgPath)
	if err != nil {
		return err
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
	fmt.Fprintf(stdout, "produced %s/%d/%d\n", r.Topic, r.Partition, r.Offset)
	return nil
}

// kafkaConfig reads the kafka block of the config, or the brokers from
// SWITCHYARD_KAFKA_BROKERS alone when no config file is there.
func kafkaConfig(fs *flag.FlagSet, cfgPath string) (config.Kafka, error) {
	if _, err := os.Stat(cfgPath); !configNamed(fs) && errors.Is(err, os.ErrNotExist) {
		var bs []string
		for _, b := range strings.Split(os.Getenv("SWITCHYARD_KAFKA_BROKERS"), ",") {
			if b = strings.TrimSpace(b); b != "" {
				bs = append(bs, b)
			}
		}
		if len(bs) == 0 {
			return config.Kafka{}, usagef("kafka.brokers: not set: pass --config or set SWITCHYARD_KAFKA_BROKERS")
		}
		return config.Kafka{Brokers: bs, ClientID: "switchyard"}, nil
	}
	cfg, err := loadConfig(fs, cfgPath, false)
	if err != nil {
		return config.Kafka{}, err
	}
	return cfg.Kafka, nil
}
