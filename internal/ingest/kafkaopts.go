package ingest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/switchyard-dev/switchyard/config"
)

// OAuthTokenFunc returns a fresh OAUTHBEARER token for each authentication.
type OAuthTokenFunc func(ctx context.Context) (string, error)

// partitionFetchBytes is a partition's most in one fetch: the client's
// default (and the Java consumer's), kept below a smaller fetch bound.
const partitionFetchBytes = 1 << 20

// ClientOpts translates the kafka block of the config into the franz-go
// options every client of ours shares: seeds, client id, the fetch bound,
// TLS and SASL.
// With groupOpts it is the one place our YAML becomes kgo options;
// everything else of kgo is left to embedders as is.
// tokenFn is the OAUTHBEARER hook for embedders; the file's token_file is
// used when tokenFn is nil.
func ClientOpts(k config.Kafka, tokenFn OAuthTokenFunc) ([]kgo.Opt, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(k.Brokers...)}
	if k.FetchMaxBytes > 0 {
		// Without a bound of its own, a client buffers up to 50 MiB a
		// fetch (1 MiB a partition), compressed: the bench's four
		// partitions of small records held 100,000 of them, ten polls'
		// worth, and the process's RSS reached 150-290 MiB by payload
		// size (docs/performance.md, "What a consumer holds").
		opts = append(opts, kgo.FetchMaxBytes(int32(k.FetchMaxBytes)),
			kgo.FetchMaxPartitionBytes(int32(min(k.FetchMaxBytes, partitionFetchBytes))))
	}
	if k.ClientID != "" {
		opts = append(opts, kgo.ClientID(k.ClientID))
	}
	if k.TLS != nil {
		tc, err := tlsConfig(*k.TLS)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if s := k.SASL; s != nil {
		switch s.Mechanism {
		case "PLAIN":
			opts = append(opts, kgo.SASL(plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism()))
		case "SCRAM-SHA-256":
			opts = append(opts, kgo.SASL(scram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism()))
		case "SCRAM-SHA-512":
			opts = append(opts, kgo.SASL(scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism()))
		case "OAUTHBEARER":
			if tokenFn == nil {
				if s.TokenFile == "" {
					return nil, errors.New("kafka.sasl.token_file: required for OAUTHBEARER unless a token hook is passed to the engine")
				}
				tokenFn = fileToken(s.TokenFile)
			}
			opts = append(opts, kgo.SASL(oauth.Oauth(func(ctx context.Context) (oauth.Auth, error) {
				tok, err := tokenFn(ctx)
				return oauth.Auth{Token: tok}, err
			})))
		default:
			return nil, fmt.Errorf("kafka.sasl.mechanism: %q is not supported", s.Mechanism)
		}
	}
	return opts, nil
}

// groupOpts are the kafka block's consumer-group settings, which only the
// ingest consumer uses: replay and re-read clients read partitions
// directly and must never join the group.
func groupOpts(k config.Kafka) []kgo.Opt {
	reset := kgo.NewOffset().AtStart()
	if k.Reset == "latest" {
		reset = kgo.NewOffset().AtEnd()
	}
	opts := []kgo.Opt{kgo.ConsumerGroup(k.Group), kgo.ConsumeResetOffset(reset), kgo.SessionTimeout(k.SessionTimeout.D())}
	if k.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(k.InstanceID))
	}
	if k.GroupProtocol == "consumer" {
		opts = append(opts, kgo.ServerSideBalancer())
	}
	return opts
}

func tlsConfig(t config.KafkaTLS) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("kafka.tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("kafka.tls.ca_file: %s holds no PEM certificate", t.CAFile)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("kafka.tls.cert_file/key_file: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// fileToken reads the token file at every authentication, so that a
// sidecar can rotate it without a restart.
func fileToken(path string) OAuthTokenFunc {
	return func(context.Context) (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("kafka.sasl.token_file: %w", err)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return "", fmt.Errorf("kafka.sasl.token_file: %s is empty", path)
		}
		return tok, nil
	}
}
