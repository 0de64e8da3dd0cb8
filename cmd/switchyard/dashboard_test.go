package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// TestDashboardPauseStopsClaiming: a queue paused from the dashboard, in
// headless Chromium against a real process, claims nothing while records
// keep arriving as queued jobs; resumed from the page, they run.
func TestDashboardPauseStopsClaiming(t *testing.T) {
	t.Parallel()
	schema, topic := testenv.Schema(t), testenv.Topic(t, 1)
	store := testenv.Store(t, schema)
	tg := newTarget(t)
	cfg := writeConfig(t, testConfig{Group: testenv.Name("g"), Schema: schema, Listen: "127.0.0.1:0",
		Topic: topic, TargetURL: tg.URL()})
	p := startRun(t, "run-dashboard", cfg)
	addr := adminAddr(t, p)
	testenv.Produce(t, topic, &kgo.Record{Value: []byte(`{"n":0}`)})
	testenv.Eventually(t, 30*time.Second, "the first job to reach the target", func() bool { return len(tg.received()) == 1 })

	ctx := testenv.Browser(t, chromedp.WindowSize(1280, 900))
	run := func(actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(c, actions...); err != nil {
			t.Fatal(err)
		}
	}
	row := func() string {
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		s, err := chromedp.Run(c, chromedp.Evaluate[string](`(document.querySelector('tr[data-queue="q"]') || {}).textContent || ""`))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	run(chromedp.Navigate("http://" + addr + "/#/queues"))
	run(chromedp.Click(`tr[data-queue="q"] button[data-action="pause"]`, chromedp.NodeVisible))
	testenv.Eventually(t, 20*time.Second, "the page to show q paused", func() bool { return strings.Contains(row(), "paused") })

	testenv.Produce(t, topic, &kgo.Record{Value: []byte(`{"n":1}`)}, &kgo.Record{Value: []byte(`{"n":2}`)},
		&kgo.Record{Value: []byte(`{"n":3}`)})
	testenv.Eventually(t, 30*time.Second, "the three records to wait as queued jobs", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'queued'`) == 3
	})
	// The process polls q every 100 ms and re-reads the pauses twice a
	// second: two seconds with no claim is twenty polls that took nothing.
	if testenv.Until(2*time.Second, func() bool {
		return len(tg.received()) > 1 || testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state <> 'queued' AND state <> 'succeeded'`) > 0
	}) {
		t.Fatalf("a paused queue claimed: %d calls, jobs %v", len(tg.received()), jobs(t, store))
	}
	testenv.Eventually(t, 20*time.Second, "the page to show the three queued", func() bool {
		return strings.Contains(row(), "paused03")
	})

	run(chromedp.Click(`tr[data-queue="q"] button[data-action="resume"]`, chromedp.NodeVisible))
	testenv.Eventually(t, 30*time.Second, "the three jobs to run once q is resumed", func() bool { return len(tg.received()) == 4 })
	testenv.Eventually(t, 20*time.Second, "the page to show q active", func() bool { return strings.Contains(row(), "active") })
	if n := testenv.Count(t, store, `SELECT count(*) FROM audit_log WHERE target = 'queue/q'`); n != 2 {
		t.Errorf("%d audit entries for queue/q, want the pause and the resume", n)
	}
	term(t, p, 30*time.Second)
}
