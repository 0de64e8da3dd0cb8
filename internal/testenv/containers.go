package testenv

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/kafka"
	"github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"
)

// Where the shared services come from: the SWITCHYARD_* variables (the
// local scripts under deploy/local/ set them: `make test`), containers
// that testcontainers-go starts where a Docker engine answers, or
// nowhere, which fails the test saying how to get them.
type serviceSource int

const (
	fromEnv serviceSource = iota
	fromContainers
	fromNowhere
)

// chooseServices picks the shared services' source: the variables when
// either is set (a half-set pair is then reported as such), else
// containers when Docker answers (dockerUp is asked only then: it takes
// a moment), else nowhere.
func chooseServices(env func(string) string, dockerUp func() bool) serviceSource {
	switch {
	case env("SWITCHYARD_DATABASE_URL") != "" || env("SWITCHYARD_KAFKA_BROKERS") != "":
		return fromEnv
	case dockerUp():
		return fromContainers
	}
	return fromNowhere
}

// dockerAnswers reports whether a Docker engine answers testcontainers.
func dockerAnswers() (answers bool) {
	// Where no Docker host is configured at all, testcontainers panics
	// (MustExtractDockerHost) rather than returning an error: that is a
	// "no" too, and the test then says how to get the services.
	defer func() {
		if recover() != nil {
			answers = false
		}
	}()
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return false
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return p.Health(ctx) == nil
}

// The images of the container path: the Postgres the project supports,
// and Apache Kafka in KRaft mode as the kafka module runs it.
const (
	postgresImage = "postgres:15"
	kafkaImage    = "confluentinc/confluent-local:7.6.0"
)

var containers struct {
	once sync.Once
	svc  Services
	err  error
}

// startContainers starts Postgres and Kafka once per test binary and
// points the SWITCHYARD_* variables at them, so that the processes tests
// start find them too. testcontainers' reaper removes them when the
// binary exits.
func startContainers() (Services, error) {
	containers.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		pg, err := postgres.Run(ctx, postgresImage, postgres.WithDatabase("switchyard"),
			postgres.WithUsername("switchyard"), postgres.WithPassword("switchyard"),
			testcontainers.WithWaitStrategy(wait.ForLog("database system is ready to accept connections").
				WithOccurrence(2).WithStartupTimeout(2*time.Minute)))
		if err != nil {
			containers.err = fmt.Errorf("postgres container: %w", err)
			return
		}
		url, err := pg.ConnectionString(ctx, "sslmode=disable")
		if err != nil {
			containers.err = fmt.Errorf("postgres container: %w", err)
			return
		}
		kc, err := kafka.Run(ctx, kafkaImage)
		if err != nil {
			containers.err = fmt.Errorf("kafka container: %w", err)
			return
		}
		brokers, err := kc.Brokers(ctx)
		if err != nil {
			containers.err = fmt.Errorf("kafka container: %w", err)
			return
		}
		containers.svc = Services{DatabaseURL: url, Brokers: brokers}
		_ = os.Setenv("SWITCHYARD_DATABASE_URL", url)
		_ = os.Setenv("SWITCHYARD_KAFKA_BROKERS", strings.Join(brokers, ","))
	})
	return containers.svc, containers.err
}
