package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/internal/testenv"
)

func TestExperimentRestart(t *testing.T) {
	schema := testenv.Schema(t)
	store := testenv.Store(t, schema)
	topic := testenv.Topic(t, 3)
	tg := newTarget(t)
	cfg := writeConfig(t, e2eConfig{Topic: topic, Group: testenv.Name("g"), Schema: schema, TargetURL: tg.URL(), Dedupe: true})
	p := startRun(t, "p1", cfg)
	p.waitRunning()
	testenv.Produce(t, topic, &kgo.Record{Partition: 0, Value: []byte(`{"id":"a"}`)})
	t0 := time.Now()
	testenv.Eventually(t, 60*time.Second, "a", func() bool { return count(t, store, `SELECT count(*) FROM jobs WHERE state='succeeded'`) == 1 })
	t.Log("first", time.Since(t0))
	p.kill()
	p2 := startRun(t, "p2", cfg)
	p2.waitRunning()
	for i := 0; i < 3; i++ {
		testenv.Produce(t, topic, &kgo.Record{Partition: int32(i), Value: []byte(fmt.Sprintf(`{"id":"b%d"}`, i))})
	}
	t0 = time.Now()
	testenv.Eventually(t, 120*time.Second, "b", func() bool { return count(t, store, `SELECT count(*) FROM jobs WHERE state='succeeded'`) == 4 })
	t.Log("after kill", time.Since(t0))
	t.Log(p2.log.String())
}
