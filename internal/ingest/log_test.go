package ingest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// A broker that refuses our SASL credentials makes an error-level log
// that says so and names the config to fix, without the password.
// kfake answers SaslAuthenticate with the error a real broker sends.
func TestSASLFailureIsAnErrorThatSaysSo(t *testing.T) {
	t.Parallel()
	broker, err := kfake.NewCluster(kfake.EnableSASL(), kfake.Superuser("PLAIN", "admin", "right"), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Close()
	broker.ControlKey(int16(kmsg.SASLAuthenticate), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		broker.KeepControl()
		resp := kreq.(*kmsg.SASLAuthenticateRequest).ResponseKind().(*kmsg.SASLAuthenticateResponse)
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		msg := "Authentication failed: Invalid username or password"
		resp.ErrorMessage = &msg
		return resp, nil, true
	})
	opts, err := ClientOpts(config.Kafka{Brokers: broker.ListenAddrs(),
		SASL: &config.KafkaSASL{Mechanism: "PLAIN", Username: "admin", Password: "hunter2-wrong"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	c, err := New(Config{Kafka: testenv.KafkaBlock(broker.ListenAddrs(), "g", 0), Routes: []*Route{route(t, "t", "")}, Opts: opts},
		nil, zap.New(core), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Stop(context.Background()) }()
	deadline := time.Now().Add(20 * time.Second)
	for logs.FilterMessageSnippet("SASL authentication failed").Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no SASL error logged; logs: %v", logs.All())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, e := range logs.All() {
		if strings.Contains(e.Message, "SASL") && e.Level != zap.ErrorLevel {
			t.Errorf("SASL failure logged at %s: %s", e.Level, e.Message)
		}
		if strings.Contains(fmt.Sprint(e.Message, e.ContextMap()), "hunter2") {
			t.Errorf("password in log: %s %v", e.Message, e.ContextMap())
		}
	}
	if !strings.Contains(logs.FilterMessageSnippet("SASL").All()[0].Message, "kafka.sasl") {
		t.Error("the log does not name the config to fix")
	}
}
