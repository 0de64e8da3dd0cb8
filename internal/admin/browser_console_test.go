package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"go.uber.org/zap/zaptest"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/dlq"
	"github.com/switchyard-dev/switchyard/internal/ingest"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/schedule"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// The operator console in a real browser: each page against a store
// seeded with a little of everything, driven by headless Chromium at the
// 1,280 px the issue asks the console to be usable at.

const consoleWidth, consoleHeight = 1280, 900

// console is an admin server over a seeded store, and what the seed made.
type console struct {
	store *pgstore.Store
	url   string
	// jsonJob, textJob and binaryJob hold payloads of each kind; deadJob
	// died and was parked as entry deadEntry; redrivenJob died after three
	// attempts, was re-driven from entry redrivenEntry and failed again.
	jsonJob, textJob, binaryJob, deadJob, retryJob int64
	deadEntry, redrivenJob, redrivenEntry          int64
	// deadHead heads the blocked lane ledger/acct-1; laneJob is third in
	// the lane of acct-2.
	deadHead, laneJob int64
	// heldJob is queued behind its group acme-0, at its cap.
	heldJob int64
}

// consoleRoutes are the routes of the console's server: the Kafka page
// shows them, with the lag consoleLag reads.
var consoleRoutes = []RouteConfig{
	{Name: "orders", Topic: "orders", Queue: "interactive",
		Filter: &RouteFilter{Header: "event-type", In: []string{"order.created", "order.paid"}},
		Limits: &RouteLimits{MaxRunning: 20, Group: &GroupLimit{Field: "customer", MaxRunning: 1},
			RateLimit: &RateLimitShown{Limit: 100, Per: "1s", Burst: 20}}},
	{Name: "order-audit", Topic: "orders", Queue: "bulk"},
	{Name: "events", Topic: "events", Queue: "bulk", MaxDepth: 10},
	{Name: "exports", Topic: "exports", Queue: "reports"},
	{Name: "ledger", Topic: "ledger", Queue: "ledger"},
}

// consoleLag stands in for the fleet's Kafka positions (ingest.LagReader
// needs a broker; the pages only show what it answers).
func consoleLag(_ context.Context, topics []string) (map[string]ingest.TopicLag, error) {
	out := map[string]ingest.TopicLag{}
	for _, topic := range topics {
		var lag ingest.TopicLag
		for p := range int32(3) {
			stored := int64(1200 + 37*int64(p))
			if topic == "exports" {
				stored = 40
			}
			end := stored + int64(p)*7
			if topic == "events" {
				end += 480
			}
			lag.Partitions = append(lag.Partitions, ingest.PartitionPos{Partition: p, Stored: &stored, End: end, Lag: end - stored})
			lag.Records += end - stored
		}
		out[topic] = lag
	}
	return out, nil
}

// newConsole seeds a store and serves the admin API over it with cfg
// (its Queues, Routes, Lag and DLQ filled in when unset).
func newConsole(t *testing.T, cfg Config) *console {
	t.Helper()
	st := newStore(t, true)
	if cfg.Queues == nil {
		cfg.Queues = []string{"bulk", "interactive", "ledger", "reports"}
	}
	if cfg.Routes == nil {
		cfg.Routes = consoleRoutes
	}
	if cfg.Groups.Routes == nil {
		cfg.Groups = pgstore.Groups{Routes: map[string]pgstore.GroupRoute{}, Only: map[string]bool{}}
		for _, r := range cfg.Routes {
			if r.Limits != nil && r.Limits.Group != nil {
				cfg.Groups.Routes[r.Name] = pgstore.GroupRoute{Queue: r.Queue, Cap: r.Limits.Group.MaxRunning}
			}
		}
	}
	if cfg.Lag == nil {
		cfg.Lag = consoleLag
	}
	if cfg.DLQ == nil {
		cfg.DLQ = dlq.New(st, nil, nil)
	}
	if cfg.Concurrency == nil {
		cfg.Concurrency = map[string]int{"bulk": 4, "interactive": 16, "ledger": 8, "reports": 2}
	}
	if cfg.Schedules == nil {
		cfg.Schedules = consoleSchedules()
	}
	c := &console{store: st}
	c.seed(t)
	srv := httptest.NewServer(New(cfg, st, zaptest.NewLogger(t)).Handler())
	t.Cleanup(srv.Close)
	c.url = srv.URL
	return c
}

// consoleSchedules are the schedules of the console's server: the
// hourly export's jobs join the route of its kind, the seeded exports.
func consoleSchedules() []schedule.Schedule {
	cfg := config.Config{Schedules: []config.Schedule{
		{Name: "nightly-reconcile", Cron: "0 2 * * *", Kind: "reconcile", Queue: "bulk"},
		{Name: "hourly-export", Cron: "15 * * * *", Timezone: "Europe/Berlin", Kind: "export.render", Queue: "reports"},
	}, Routes: []config.Route{{Name: "exports", Topic: "exports", Kind: "export.render", Queue: "reports"}}}
	cfg.SetDefaults()
	out := schedule.Of(&cfg)
	for i := range out {
		out[i].MaxAttempts = 3
	}
	return out
}

func consoleJob(route, kind, queue, key string, offset int64, payload []byte, headers ...string) pgstore.NewJob {
	j := newJob(queue, key, offset)
	j.Route, j.Kind, j.Topic, j.Payload = route, kind, route, payload
	for i := 0; i+1 < len(headers); i += 2 {
		j.HeaderKeys = append(j.HeaderKeys, headers[i])
		j.HeaderVals = append(j.HeaderVals, []byte(headers[i+1]))
	}
	return j
}

// seed makes jobs in every queue and several states, DLQ entries of
// several reasons, one of them re-driven, and a few audited actions.
func (c *console) seed(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	st := c.store
	var jobs []pgstore.NewJob
	for i := range 8 {
		jobs = append(jobs, consoleJob("orders", "order.sync", "interactive", fmt.Sprintf("customer-%d", 100+i%3), int64(i),
			[]byte(fmt.Sprintf(`{"order_id":%d,"customer":"acme-%d","items":[{"sku":"A-1","qty":2}],"total":{"amount":"19.90","currency":"EUR"}}`, 5000+i, i%3)),
			"event-type", "order.created", "trace-id", fmt.Sprintf("4bf92f3577b34da6a3ce929d0e0e%04d", i)))
		jobs[i].Group = fmt.Sprintf("acme-%d", i%3)
	}
	seed(t, st, jobs, nil)
	// Claimed in id order: the first dies, the second retries, the third
	// succeeds with a result, the fourth keeps running.
	leases := claim(t, st, "interactive", 4)
	kill(t, st, leases[0])
	if _, err := st.JobComplete(ctx, []pgstore.Outcome{
		{ID: leases[1].ID, Token: leases[1].Token, State: "retrying", Error: "HTTP 503: upstream unavailable", Delay: 10 * time.Minute},
		{ID: leases[2].ID, Token: leases[2].Token, State: "succeeded", Result: []byte(`{"invoice":"INV-2291","status":"sent"}`), ResultType: "application/json"},
	}); err != nil {
		t.Fatal(err)
	}
	c.deadJob, c.retryJob, c.jsonJob = leases[0].ID, leases[1].ID, leases[2].ID
	// The fourth runs for acme-0, whose cap is 1: its next job is held.
	held, err := st.JobList(ctx, pgstore.JobFilter{Route: "orders", State: "queued", Key: "customer-100", Limit: 2})
	if err != nil || len(held) != 1 {
		t.Fatalf("acme-0's queued jobs: %v %v", held, err)
	}
	c.heldJob = held[0].ID

	var bulk []pgstore.NewJob
	for i := range 57 {
		bulk = append(bulk, consoleJob("events", "event.ingest", "bulk", "", int64(100+i), []byte(fmt.Sprintf("page view %d from 10.0.0.%d", i, i%250))))
	}
	poison := []pgstore.Poison{
		{Reason: "decode", Route: "events", Queue: "bulk", Error: "invalid character 'x' looking for beginning of value",
			Payload: []byte("x=1&y=\xff\xfe"), Topic: "events", Partition: 1, Offset: 300},
		{Reason: "missing_field", Route: "orders", Queue: "interactive", Error: `field "customer_id" not found`,
			Payload: []byte(`{"order_id":77}`), HeaderKeys: []string{"event-type"}, HeaderVals: [][]byte{[]byte("order.created")},
			Topic: "orders", Partition: 2, Offset: 301},
	}
	seed(t, st, bulk, poison)
	rows, err := st.JobList(ctx, pgstore.JobFilter{Route: "events", Limit: 100})
	if err != nil || len(rows) != 57 {
		t.Fatalf("the text jobs: %v %v", rows, err)
	}
	c.textJob = rows[1].ID
	if err := st.JobCancel(ctx, rows[56].ID, "oncall"); err != nil {
		t.Fatal(err)
	}
	// Before the binary export joins its queue: the re-driven export is
	// then the only job there to claim.
	c.seedRedriven(t)
	binary := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x01\x00")
	seed(t, st, []pgstore.NewJob{consoleJob("exports", "export.render", "reports", "", 200, binary)}, nil)
	if rows, err = st.JobList(ctx, pgstore.JobFilter{Route: "exports", After: c.redrivenJob, Limit: 1}); err != nil || len(rows) != 1 {
		t.Fatalf("the binary job: %v %v", rows, err)
	}
	c.binaryJob = rows[0].ID

	// A second job dies and is re-driven, so that the history shows one.
	l := claim(t, st, "bulk", 1)[0]
	kill(t, st, l)
	entries, err := st.DLQList(ctx, pgstore.DLQFilter{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		switch {
		case e.JobID != nil && *e.JobID == c.deadJob:
			c.deadEntry = e.ID
		case e.JobID != nil && *e.JobID == l.ID:
			if _, err := dlq.New(st, nil, nil).Redrive(ctx, e.ID, "oncall"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if c.deadEntry == 0 {
		t.Fatalf("no DLQ entry for job %d: %+v", c.deadJob, entries)
	}
	c.seedLanes(t)
	if _, err := st.Pause(ctx, pgstore.PauseQueue, "reports", "oncall"); err != nil {
		t.Fatal(err)
	}
}

// seedRedriven makes an export that fails three times and dies, is
// re-driven by oncall, and fails its first attempt again: its page lists
// attempts 1, 2, 3, 1.
func (c *console) seedRedriven(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	j := consoleJob("exports", "export.render", "reports", "", 190, []byte(`{"report":"invoices","month":"2026-11","format":"pdf"}`))
	j.Partition = 1 // the binary export, seeded after, is on partition 0
	seed(t, c.store, []pgstore.NewJob{j}, nil)
	c.redrivenJob = runToDeath(t, c.store, "reports", 1, 3, "HTTP 504: renderer timed out after 30s").ID
	c.redrivenEntry = parkedEntry(t, c.store, c.redrivenJob)
	if _, err := dlq.New(c.store, nil, nil).Redrive(ctx, c.redrivenEntry, "oncall"); err != nil {
		t.Fatal(err)
	}
	l := claim(t, c.store, "reports", 1)[0]
	if _, err := c.store.JobComplete(ctx, []pgstore.Outcome{{ID: l.ID, Token: l.Token, State: "retrying",
		Error: `HTTP 500: template "invoice-v2" not found`, Delay: 10 * time.Minute}}); err != nil {
		t.Fatal(err)
	}
}

// seedLanes makes lanes of the ordered route ledger: acct-1 blocked by
// its dead head, acct-2 and acct-3 waiting.
func (c *console) seedLanes(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	lane := &pgstore.LanePolicy{Policy: "none", OnDead: "block", GapTimeout: time.Minute, GapPolicy: "park"}
	var jobs []pgstore.NewJob
	for i, n := range []int{4, 6, 3} {
		for k := range n {
			j := consoleJob("ledger", "ledger.post", "ledger", fmt.Sprintf("acct-%d", i+1), int64(400+10*i+k),
				[]byte(fmt.Sprintf(`{"account":"acct-%d","entry":%d,"amount":%d}`, i+1, k, 100*(k+1))))
			j.Lane = lane
			jobs = append(jobs, j)
		}
	}
	seed(t, c.store, jobs, nil)
	head := claim(t, c.store, "ledger", 1)[0]
	done, err := c.store.JobComplete(ctx, []pgstore.Outcome{{ID: head.ID, Token: head.Token, State: "dead",
		Reason: "permanent", Error: "HTTP 409: account frozen", Lane: &pgstore.LaneRef{Route: "ledger", Key: "acct-1"}}})
	if err != nil || !done.Applied[head.Token] {
		t.Fatalf("kill the lane's head: %v %v", done.Applied, err)
	}
	c.deadHead = head.ID
	rows, err := c.store.JobList(ctx, pgstore.JobFilter{Route: "ledger", Key: "acct-2", Limit: 10})
	if err != nil || len(rows) != 6 {
		t.Fatalf("acct-2's jobs: %v %v", rows, err)
	}
	c.laneJob = rows[2].ID
}

// tab is a browser tab on the console, 1,280 px wide, that fails the
// test on any exception or error the page logs (a CSP violation
// included).
type tab struct {
	t     *testing.T
	ctx   context.Context
	url   string
	width int
	// unreachable: the test made the API unreachable on purpose, and
	// the browser's own log of the failed requests is no fault.
	unreachable atomic.Bool
}

func openConsole(t *testing.T, url string) *tab {
	t.Helper()
	return openConsoleAt(t, url, consoleWidth, consoleHeight)
}

// openConsoleAt opens a tab of width × height px: a phone's 390 px, say.
func openConsoleAt(t *testing.T, url string, width, height int) *tab {
	t.Helper()
	ctx := testenv.Browser(t, chromedp.WindowSize(width, height))
	p := &tab{t: t, ctx: ctx, url: url, width: width}
	listen, stop := context.WithCancel(ctx)
	messages := chromedp.Console(listen)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException {
				// An action the test expects to be refused logs its 4xx.
				if !strings.Contains(m.Text, "the server responded with a status of 4") &&
					!(p.unreachable.Load() && strings.Contains(m.Text, "net::ERR_EMPTY_RESPONSE")) {
					t.Errorf("the page logged %s: %s", m.Type, m)
				}
			}
		}
	}()
	t.Cleanup(func() {
		stop()
		wg.Wait()
	})
	p.do(chromedp.EmulateViewport(int64(width), int64(height)))
	return p
}

func (p *tab) do(actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := p.try(actions...); err != nil {
		p.t.Fatal(err)
	}
}

func (p *tab) try(actions ...chromedp.Action[chromedp.Void]) error {
	c, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	return chromedp.Do(c, actions...)
}

// goTo opens a page of the console by its hash route.
func (p *tab) goTo(hash string) {
	p.t.Helper()
	p.do(chromedp.Navigate(p.url + "/#/" + hash))
}

// eval runs a JavaScript expression in the page.
func eval[T any](p *tab, js string) T {
	p.t.Helper()
	c, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(c, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		p.t.Fatalf("evaluating %s: %v", js, err)
	}
	return v
}

// text is the text of the element sel selects, "" when there is none.
func (p *tab) text(sel string) string {
	p.t.Helper()
	return eval[string](p, fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ""`, sel))
}

// waitText waits until the element sel selects shows want.
func (p *tab) waitText(sel, want string) {
	p.t.Helper()
	var last string
	if !testenv.Until(20*time.Second, func() bool {
		last = p.text(sel)
		return strings.Contains(last, want)
	}) {
		p.t.Fatalf("%s never showed %q; it shows %q (status line: %q)", sel, want, last, p.text("#status"))
	}
}

// count is how many elements sel selects.
func (p *tab) count(sel string) int {
	p.t.Helper()
	return eval[int](p, fmt.Sprintf(`document.querySelectorAll(%q).length`, sel))
}

// setValue sets a form field's value, as typing would.
func (p *tab) setValue(sel, value string) {
	p.t.Helper()
	if !eval[bool](p, fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return false; e.value = %q; return true })()`, sel, value)) {
		p.t.Fatalf("no %s to set", sel)
	}
}

// click clicks the element sel selects as a mouse would. The console
// renders a page again after each action and refresh, so the node found
// for sel can be replaced before the click reaches it (the browser then
// answers "Could not find node with given id"): sel is looked up again.
func (p *tab) click(sel string) {
	p.t.Helper()
	var err error
	for range 5 {
		if err = p.try(chromedp.Click(sel, chromedp.NodeVisible)); err == nil || !strings.Contains(err.Error(), "Could not find node") {
			break
		}
	}
	if err != nil {
		p.t.Fatalf("click %s: %v", sel, err)
	}
}

// fits checks that the page needs no horizontal scrolling at the tab's
// width.
func (p *tab) fits(what string) {
	p.t.Helper()
	if w := eval[int](p, `document.documentElement.scrollWidth`); w > p.width {
		p.t.Errorf("%s is %d px wide at a %d px window: it scrolls sideways", what, w, p.width)
	}
}

// screenshot saves the page as dashboard-<name>.png in
// $SWITCHYARD_SCREENSHOTS (`make screenshots` sets it to docs/), and
// takes it anyway otherwise, so that the capture itself is tested.
func (p *tab) screenshot(name string) {
	p.t.Helper()
	c, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(c, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Fatal(err)
	}
	if dir := os.Getenv("SWITCHYARD_SCREENSHOTS"); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, "dashboard-"+name+".png"), png, 0o644); err != nil {
			p.t.Fatal(err)
		}
	}
}

// TestBrowserConsolePages loads each page and checks that it shows its
// data, fits 1,280 px, and renders a screenshot.
func TestBrowserConsolePages(t *testing.T) {
	t.Parallel()
	c := newConsole(t, Config{})
	p := openConsole(t, c.url)

	p.goTo("queues")
	p.waitText(`tr[data-queue="interactive"]`, "interactive")
	// The first poll has no rates yet: the note says when they come, not
	// that they span 0 s.
	if note := p.text(".kindnote"); strings.Contains(note, "last 0 s") {
		t.Errorf("the first poll's rates note: %q", note)
	}
	if got := p.text(`tr[data-queue="reports"]`); !strings.Contains(got, "paused") {
		t.Errorf("the paused queue's row: %q", got)
	}
	// Its backlog waits for the resume, whatever the rates say.
	p.waitText(`tr[data-queue="reports"] .trend`, "held: paused")
	if got := p.text(`tr[data-queue="bulk"] td:nth-child(4)`); got != "56" {
		t.Errorf("bulk's row shows %q queued jobs, want its 56", got)
	}
	if got := p.text(`tr[data-queue="interactive"] td:nth-child(6)`); got != "1 / 16" {
		t.Errorf("interactive's running / concurrency: %q", got)
	}
	// The fleet's counters, as the processes publish them, move between
	// the page's polls: a rate and the trend it implies.
	flow := func(ia, ba, ifin, bfin int64) {
		t.Helper()
		if err := c.store.QueueFlowPut(context.Background(), "proc-a",
			map[string]int64{"interactive": ia, "bulk": ba}, map[string]int64{"interactive": ifin, "bulk": bfin}); err != nil {
			t.Fatal(err)
		}
	}
	flow(100, 500, 90, 200)
	p.waitText(`tr[data-queue="bulk"] .trend`, "grows by")
	flow(160, 520, 100, 900)
	p.waitText(`tr[data-queue="interactive"] .trend`, "grows by")
	p.waitText(`tr[data-queue="bulk"] .trend`, "drains in")
	p.fits("the queues page")
	p.screenshot("queues")
	// A counter that goes down was reset: the window starts again, so the
	// trend is "measuring…" and then, the counters standing still,
	// "steady". Measured from the first poll's zeros it would grow.
	flow(5, 5, 1, 1)
	var trend string
	if !testenv.Until(20*time.Second, func() bool {
		trend = p.text(`tr[data-queue="bulk"] .trend`)
		return trend == "measuring…" || trend == "steady"
	}) {
		t.Errorf("after a counter reset bulk's trend is %q, want the window restarted", trend)
	}

	p.goTo("jobs")
	p.waitText("#data tbody", "order.sync")
	if n := p.count("#data tbody tr"); n != 50 {
		t.Errorf("the first page of jobs has %d rows, want 50", n)
	}
	if got := eval[[]string](p, `[...document.querySelectorAll("#data td.err")].filter(td => td.title !== td.textContent).map(td => td.textContent)`); len(got) != 0 {
		t.Errorf("the jobs list's last errors %q have no tooltip with the whole error", got)
	}
	p.fits("the jobs page")
	p.screenshot("jobs")

	p.goTo(fmt.Sprintf("jobs/%d", c.retryJob))
	p.waitText("h1", fmt.Sprintf("job %d", c.retryJob))
	p.waitText(`pre[data-what="payload"]`, `"order_id": 5001`)
	p.waitText("#data", "HTTP 503: upstream unavailable")
	p.fits("a job's page")
	p.screenshot("job")

	// A re-driven job's attempts count from 1 again: a row between the
	// runs says where the re-drive came, when and by whom.
	p.goTo(fmt.Sprintf("jobs/%d", c.redrivenJob))
	p.waitText("#attempts", "Re-driven from the DLQ")
	if got := eval[string](p, `[...document.querySelectorAll("#attempts tbody tr")].map(tr =>
		tr.dataset.redrive ? "re-drive " + tr.dataset.redrive : tr.cells[0].textContent).join(", ")`); got != fmt.Sprintf("1, 2, 3, re-drive %d, 1", c.redrivenEntry) {
		t.Errorf("the re-driven job's attempts read %q, want 1, 2, 3, the re-drive of entry %d, 1", got, c.redrivenEntry)
	}
	if got := p.text("#attempts tr[data-redrive]"); !strings.Contains(got, " ago by oncall (entry ") {
		t.Errorf("the re-drive's row says %q, not when and by whom", got)
	}
	if got := p.text("#data section:first-of-type"); !strings.Contains(got, "1 of 3 since its last re-drive") {
		t.Errorf("the job's attempts do not say they count from the re-drive: %q", got)
	}
	p.fits("a re-driven job's page")
	p.screenshot("job-redriven")

	// A job held by its group's cap reads queued: its page says why.
	p.goTo(fmt.Sprintf("jobs/%d", c.heldJob))
	p.waitText("#data", "held by the group's cap")
	if got := p.text("#data"); !strings.Contains(got, "acme-0") || !strings.Contains(got, "1 of its max_running 1") {
		t.Errorf("the held job's page does not name its group and its cap: %q", got)
	}
	p.fits("a held job's page")
	p.screenshot("job-held")

	p.goTo("lanes")
	p.waitText("#blocked tbody", "acct-1")
	if got := p.text("#blocked tbody"); !strings.Contains(got, fmt.Sprintf("job %d", c.deadHead)) || !strings.Contains(got, "dead") {
		t.Errorf("the blocked lane does not show its dead head job %d: %q", c.deadHead, got)
	}
	if got := p.text("#longest tbody tr:first-child"); !strings.Contains(got, "acct-2") || !strings.Contains(got, "5") {
		t.Errorf("the longest lane is not acct-2 with 5 waiting: %q", got)
	}
	if n := eval[int](p, `document.querySelector('#blocked a[href="#/jobs/`+fmt.Sprint(c.deadHead)+`"]') ? 1 : 0`); n != 1 {
		t.Errorf("the dead head is not a link to its job")
	}
	p.fits("the lanes page")
	p.screenshot("lanes")

	p.goTo("schedules")
	p.waitText(`tr[data-schedule="hourly-export"]`, "Europe/Berlin")
	if got := p.text(`tr[data-schedule="hourly-export"]`); !strings.Contains(got, "exports") {
		t.Errorf("the hourly export's row does not name the route its jobs join: %q", got)
	}
	if got := p.text(`tr[data-schedule="nightly-reconcile"]`); !strings.Contains(got, "0 2 * * *") || !strings.Contains(got, "in ") {
		t.Errorf("the nightly schedule's row has no cron or next slot: %q", got)
	}
	p.fits("the schedules page")
	p.screenshot("schedules")

	p.goTo("dlq")
	p.waitText("#data tbody", "missing_field")
	if n := p.count("#data tbody tr"); n != 4 {
		t.Errorf("the DLQ page lists %d entries, want the 4 parked", n)
	}
	// A last error cut at the column's width is whole in its tooltip.
	if got := eval[[]string](p, `[...document.querySelectorAll("#data td.err")].filter(td => td.title !== td.textContent).map(td => td.textContent)`); len(got) != 0 {
		t.Errorf("the DLQ list's last errors %q have no tooltip with the whole error", got)
	}
	// WCAG AA: a badge's text against its background 4.5:1; the border
	// that shows where a filter's field is, 3:1 against the page.
	if low := eval[[]string](p, contrastJS); len(low) != 0 {
		t.Errorf("too little contrast: %q", low)
	}
	p.fits("the DLQ page")
	p.screenshot("dlq")

	p.goTo(fmt.Sprintf("dlq/%d", c.deadEntry))
	p.waitText("h1", fmt.Sprintf("entry %d", c.deadEntry))
	p.waitText("section:last-child", "HTTP 422: bad order")
	// The time it was parked, as an age and as the time itself: a phone
	// shows no tooltip, and logs are searched by the time.
	if got := p.text("#data section:first-of-type"); !regexp.MustCompile(`parked[\d.]+ (s|min) ago · .*\d{4}.*\d{2}:\d{2}:\d{2}`).MatchString(got) {
		t.Errorf("the entry's parked time is not shown as an age and the exact time: %q", got)
	}
	p.fits("a DLQ entry's page")
	p.screenshot("dlq-entry")

	p.goTo("kafka")
	p.waitText(`section[data-route="orders"]`, "header event-type in [order.created, order.paid]")
	if got := p.text(`section[data-route="events"]`); !strings.Contains(got, "1,461 records") || !strings.Contains(got, "backpressured") {
		t.Errorf("the events route's card: %q", got)
	}
	if got := p.text(`section[data-route="order-audit"]`); !strings.Contains(got, "fetching") {
		t.Errorf("the order-audit route's card: %q", got)
	}
	p.fits("the Kafka page")
	p.screenshot("kafka")

	p.goTo("audit")
	p.waitText("#data tbody", "queue/reports")
	if got := p.text("#data tbody tr:first-child"); !strings.Contains(got, "pause") {
		t.Errorf("the newest audit entry is %q, want the pause", got)
	}
	if got := p.text("#data tbody tr:last-child"); !strings.Contains(got, "cancel") {
		t.Errorf("the oldest audit entry is %q, want the cancel", got)
	}
	p.fits("the audit page")
	p.screenshot("audit")
}

// contrastJS lists the badges whose text, and the form fields whose
// border, has too little contrast (WCAG 2.1 AA: 4.5:1 for text, 3:1 for
// a control's boundary against what surrounds it).
const contrastJS = `(() => {
	const rgb = (c) => c.match(/[\d.]+/g).slice(0, 3).map(Number);
	const lum = (c) => { const [r, g, b] = rgb(c).map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4 });
		return 0.2126 * r + 0.7152 * g + 0.0722 * b };
	const ratio = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p); return (x + 0.05) / (y + 0.05) };
	const out = [];
	for (const b of document.querySelectorAll(".badge")) {
		const s = getComputedStyle(b), r = ratio(s.color, s.backgroundColor);
		if (r < 4.5) out.push("badge " + b.textContent + ": " + r.toFixed(2));
	}
	const page = getComputedStyle(document.body).backgroundColor;
	for (const i of document.querySelectorAll("input[type=text], select")) {
		const r = ratio(getComputedStyle(i).borderTopColor, page);
		if (r < 3) out.push("border of " + i.name + ": " + r.toFixed(2));
	}
	return out;
})()`

// TestBrowserConsoleFiltersAndPayloads: a filter narrows the jobs, the
// API's next cursor pages them, and a job's page decodes its payload:
// JSON pretty-printed, text as is, binary as hex.
func TestBrowserConsoleFiltersAndPayloads(t *testing.T) {
	t.Parallel()
	c := newConsole(t, Config{})
	p := openConsole(t, c.url)

	p.goTo("jobs")
	p.waitText("#data tbody", "order.sync")
	p.setValue(`form[data-filters="jobs"] input[name="queue"]`, "bulk")
	p.click(`form[data-filters="jobs"] button[type="submit"]`)
	// The unfiltered list has a next page too: wait for the filtered one
	// rather than for the pager.
	var queues string
	if !testenv.Until(20*time.Second, func() bool {
		queues = eval[string](p, `[...new Set([...document.querySelectorAll("#data tbody tr td:nth-child(3)")].map(td => td.textContent))].join(",")`)
		return queues == "bulk"
	}) {
		t.Errorf("filtered by queue bulk, the list shows queues %q", queues)
	}
	p.waitText("#data .pager", "next page")
	p.click("#data .pager a:last-child")
	p.waitText("#data .pager", "first page")
	if n := p.count("#data tbody tr"); n != 7 {
		t.Errorf("the second page of bulk's 57 jobs has %d rows, want 7", n)
	}
	p.setValue(`form[data-filters="jobs"] input[name="key"]`, "customer-101")
	p.setValue(`form[data-filters="jobs"] input[name="queue"]`, "")
	p.click(`form[data-filters="jobs"] button[type="submit"]`)
	p.waitText("#data tbody", "customer-101")
	if got := eval[string](p, `[...new Set([...document.querySelectorAll("#data tbody tr td:nth-child(5)")].map(td => td.textContent))].join(",")`); got != "customer-101" {
		t.Errorf("filtered by key, the list shows keys %q", got)
	}

	p.goTo(fmt.Sprintf("jobs/%d", c.jsonJob))
	p.waitText(`pre[data-what="payload"]`, "{\n  \"order_id\": 5002,\n  \"customer\": \"acme-2\",")
	if got := p.text(`pre[data-what="result"]`); !strings.Contains(got, "\"invoice\": \"INV-2291\"") {
		t.Errorf("the result shows %q", got)
	}
	if got := p.text("#data"); !strings.Contains(got, "order.created") || !strings.Contains(got, "trace-id") {
		t.Errorf("the job's headers are not shown: %q", got)
	}

	p.goTo(fmt.Sprintf("jobs/%d", c.binaryJob))
	p.waitText(`pre[data-what="payload"]`, "89 50 4e 47 0d 0a 1a 0a  00 00 00 0d 49 48 44 52")
	if kind := eval[string](p, `document.querySelector('pre[data-what="payload"]').dataset.kind`); kind != "hex" {
		t.Errorf("the binary payload is shown as %s, want hex", kind)
	}
	if got := p.text(`pre[data-what="payload"]`); !strings.Contains(got, "|.PNG........IHDR|") {
		t.Errorf("the hex dump has no ASCII column: %q", got)
	}

	p.goTo(fmt.Sprintf("jobs/%d", c.textJob))
	p.waitText(`pre[data-what="payload"]`, "page view 1 from 10.0.0.1")
	if kind := eval[string](p, `document.querySelector('pre[data-what="payload"]').dataset.kind`); kind != "text" {
		t.Errorf("the text payload is shown as %s", kind)
	}

	p.goTo(fmt.Sprintf("jobs/%d", c.laneJob))
	p.waitText("#data", "2 jobs ahead of it")

	// A strict lane holding for a missing version has no head: its next
	// job is not called the head.
	strict := &pgstore.LanePolicy{Policy: "strict", OnDead: "block", GapTimeout: time.Hour, GapPolicy: "park"}
	var held []pgstore.NewJob
	for i, v := range []int64{1, 3} {
		j := consoleJob("accounts", "account.post", "accounts", "acct-9", int64(i), []byte(`{}`))
		j.Version, j.Lane = &v, strict
		held = append(held, j)
	}
	seed(t, c.store, held, nil)
	first := testenv.ClaimOne(t, c.store, "accounts")
	if done, err := c.store.JobComplete(context.Background(), []pgstore.Outcome{{ID: first.ID, Token: first.Token,
		State: "succeeded", Lane: first.LaneRef()}}); err != nil || !done.Applied[first.Token] {
		t.Fatalf("complete version 1: %v %v", done.Applied, err)
	}
	p.goTo(fmt.Sprintf("jobs/%d", first.ID+1))
	p.waitText("#data", "next in its lane, which has no head: it holds for version 2, missing, until in ")
	p.waitText("#data", ", then parks its next job (gap_policy park)")
	p.waitText("#data", "last applied version1")

	p.goTo("dlq?reason=missing_field")
	p.waitText("#data tbody", "missing_field")
	if n := p.count("#data tbody tr"); n != 1 {
		t.Errorf("the DLQ filtered by reason lists %d entries, want 1", n)
	}
	p.goTo("dlq?state=redriven")
	p.waitText("#data tbody", "redriven")
	if n := p.count("#data tbody tr"); n != 2 {
		t.Errorf("the re-driven DLQ entries: %d rows, want 2", n)
	}
}

// confirmAll asks for the page's bulk action ("redrive", "discard",
// "cancel") of all matching, waits for its question (ask), saves a
// screenshot of it (shot, if named), confirms, and waits for the flash.
func (p *tab) confirmAll(action, ask, shot, flash string) {
	p.t.Helper()
	p.click(`button[data-action="` + action + `-all"]`)
	p.waitText("#bulk", ask)
	if shot != "" {
		p.screenshot(shot)
	}
	p.click(`button[data-action="` + action + `-all-confirm"]`)
	p.waitText("#flash", flash)
}

// TestBrowserConsoleActions: a re-drive, a re-drive and a discard of all
// matching entries and a cancel of all matching jobs (each confirmation
// states the count), retry-now, a schedule's trigger and a
// queue's pause, each from the page, and each changing what the API says.
func TestBrowserConsoleActions(t *testing.T) {
	t.Parallel()
	c := newConsole(t, Config{})
	p := openConsole(t, c.url)
	ctx := context.Background()

	// A dead job's page names its entry, and re-drives it as the entry's
	// page does.
	p.goTo(fmt.Sprintf("jobs/%d", c.deadJob))
	p.waitText("#data", fmt.Sprintf("entry %d (re-drive it, or discard it there)", c.deadEntry))
	p.click(`button[data-action="redrive"]`)
	p.waitText("#flash", fmt.Sprintf("Entry %d re-driven.", c.deadEntry))
	p.goTo(fmt.Sprintf("dlq/%d", c.deadEntry))
	p.waitText("#redriven", "anonymous")
	if got := p.text("#redriven"); !strings.Contains(got, fmt.Sprintf("job %d", c.deadJob)) {
		t.Errorf("the re-driven entry does not link its job: %q", got)
	}
	if p.count(`button[data-action="redrive"]`) != 0 {
		t.Errorf("a re-driven entry still offers a re-drive")
	}
	if s := jobState(t, c.store, c.deadJob); s != "queued" {
		t.Errorf("the re-driven job is %s, want queued", s)
	}

	// Both parked entries of route orders... one of them has no job (a
	// missing field) and fails without a route to decode it again; the
	// ledger's dead head is in queue ledger.
	p.goTo("dlq?queue=ledger")
	p.waitText("#data tbody", "ledger")
	p.confirmAll("redrive", "Re-drive all 1 parked entry matching queue = ledger?", "", "Re-drove 1 entry.")
	if s := jobState(t, c.store, c.deadHead); s != "queued" {
		t.Errorf("the lane's dead head is %s after re-drive all, want queued", s)
	}

	p.goTo(fmt.Sprintf("jobs/%d", c.retryJob))
	p.click(`button[data-action="retry"]`)
	p.waitText("#flash", "runnable now")
	j, err := c.store.JobGet(ctx, c.retryJob)
	if err != nil || j.ScheduledAt.After(time.Now()) {
		t.Errorf("after retry-now the job is scheduled %s, after now (%v)", j.ScheduledAt, err)
	}

	// A cancel cannot be undone either: it asks, Keep keeps the job, and
	// the question's own button cancels it.
	p.goTo(fmt.Sprintf("jobs/%d", c.textJob))
	p.click(`button[data-action="cancel"]`)
	p.waitText(`[data-ask="cancel"]`, fmt.Sprintf("Cancel job %d?", c.textJob))
	if s := jobState(t, c.store, c.textJob); s != "queued" {
		t.Errorf("asked, not yet answered, the job is %s", s)
	}
	p.click(`button[data-action="cancel-keep"]`)
	p.waitText(".actions", "Cancel")
	if s := jobState(t, c.store, c.textJob); s != "queued" {
		t.Errorf("kept, the job is %s", s)
	}
	p.click(`button[data-action="cancel"]`)
	p.click(`button[data-action="cancel-confirm"]`)
	p.waitText("#flash", fmt.Sprintf("Job %d cancelled.", c.textJob))
	if s := jobState(t, c.store, c.textJob); s != "cancelled" {
		t.Errorf("confirmed, the job is %s, want cancelled", s)
	}

	p.goTo("schedules")
	p.click(`tr[data-schedule="nightly-reconcile"] button[data-action="trigger"]`)
	p.waitText("#flash", "Schedule nightly-reconcile triggered: job")
	p.click(`tr[data-schedule="hourly-export"] button[data-action="pause"]`)
	p.waitText(`tr[data-schedule="hourly-export"]`, "paused")
	p.fits("the schedules page")

	p.goTo("queues")
	p.click(`tr[data-queue="interactive"] button[data-action="pause"]`)
	p.waitText(`tr[data-queue="interactive"]`, "paused")
	pauses, err := c.store.Pauses(ctx)
	if _, ok := pauses[pgstore.PauseQueue]["interactive"]; err != nil || !ok {
		t.Errorf("interactive is not paused in the store: %v %v", pauses, err)
	}

	p.goTo("audit")
	p.waitText("#data tbody tr:first-child", "queue/interactive")
	for _, want := range []string{"schedule/hourly-export", "schedule/nightly-reconcile", fmt.Sprintf("job/%d", c.retryJob),
		fmt.Sprintf("dlq/%d", c.deadEntry), "anonymous"} {
		if got := p.text("#data tbody"); !strings.Contains(got, want) {
			t.Errorf("the audit page does not show %s: %q", want, got)
		}
	}

	// Discard cannot be undone: it asks first, the question outlives the
	// page's polls, Keep keeps, and once done the page of the gone entry
	// gives way to the list, which says what happened.
	parked, err := c.store.DLQList(ctx, pgstore.DLQFilter{Reason: "missing_field", Limit: 1})
	if err != nil || len(parked) != 1 {
		t.Fatalf("the missing_field entry: %v %v", parked, err)
	}
	entry := parked[0].ID
	p.goTo(fmt.Sprintf("dlq/%d", entry))
	p.click(`button[data-action="discard"]`)
	p.waitText(`[data-ask="discard"]`, fmt.Sprintf("Discard entry %d for good?", entry))
	p.click(`button[data-action="discard-keep"]`)
	p.waitText(".actions", "Discard")
	if _, err := c.store.DLQGet(ctx, entry); err != nil {
		t.Fatalf("kept, the entry is gone: %v", err)
	}
	p.click(`button[data-action="discard"]`)
	p.waitText(`[data-ask="discard"]`, "for good?")
	// A poll renders the page again: the status line's time moves (it
	// shows seconds; polls are 2 s apart), and the question stays.
	before := p.text("#status")
	if !testenv.Until(20*time.Second, func() bool { return p.text("#status") != before }) {
		t.Fatalf("no poll within 20 s: the status line stayed %q", before)
	}
	p.waitText(`[data-ask="discard"]`, "for good?")
	p.click(`button[data-action="discard-confirm"]`)
	p.waitText("#flash", fmt.Sprintf("Entry %d discarded.", entry))
	if hash := eval[string](p, `location.hash`); hash != "#/dlq" {
		t.Errorf("after the discard the page is %q, want the DLQ list", hash)
	}
	if _, err := c.store.DLQGet(ctx, entry); !errors.Is(err, pgstore.ErrNotFound) {
		t.Errorf("the discarded entry: %v, want it gone", err)
	}
	// The list's state filter names what it shows by default.
	if state := eval[string](p, `document.querySelector('select[name=state]').value`); state != "parked" {
		t.Errorf("the DLQ list's state filter shows %q by default, want parked", state)
	}

	// A discard of all matching says it is for good, and states the count.
	var tooLarge []pgstore.Poison
	for off := range int64(2) {
		tooLarge = append(tooLarge, pgstore.Poison{Reason: "too_large", Route: "orders", Queue: "interactive",
			Error: "record is 2 MiB, over max_record_bytes", Payload: []byte("x"), Topic: "orders-big", Offset: off})
	}
	seed(t, c.store, nil, tooLarge)
	p.goTo("dlq?reason=too_large")
	p.waitText("#data tbody", "too_large")
	p.confirmAll("discard", "Discard all 2 parked entries matching reason = too_large? They go for good: their records will not be made jobs again.",
		"dlq-discard-all", "Discarded 2 entries.")
	if n := testenv.Count(t, c.store, `SELECT count(*) FROM dlq_entries WHERE reason = 'too_large'`); n != 0 {
		t.Errorf("%d too_large entries after discard all, want 0", n)
	}

	// A cancel of all matching says it cannot be undone, and states the
	// count; its no-button keeps them.
	seed(t, c.store, []pgstore.NewJob{consoleJob("mailer", "mail.send", "mail", "m-1", 0, []byte(`{}`)),
		consoleJob("mailer", "mail.send", "mail", "m-2", 1, []byte(`{}`))}, nil)
	p.goTo("jobs?queue=mail")
	p.waitText("#data tbody", "mail.send")
	p.confirmAll("cancel", "Cancel all 2 unfinished jobs matching queue = mail? They will never run (running ones are stopped); a cancel cannot be undone.",
		"jobs-cancel-all", "Cancelled 2 jobs.")
	if n := testenv.Count(t, c.store, `SELECT count(*) FROM jobs WHERE queue = 'mail' AND state = 'cancelled'`); n != 2 {
		t.Errorf("%d mail jobs cancelled after cancel all, want 2", n)
	}

	// A record's key is whatever it carried: a long one is cut in the
	// table, not a reason to scroll sideways.
	long := "cust-" + strings.Repeat("x", 300) // no place to break a line
	lj := consoleJob("orders", "order.sync", "interactive", long, 0, []byte(`{}`))
	lj.Topic, lj.DedupeKey = "orders-long", "long" // seeded apart: orders' stored offsets moved on
	seed(t, c.store, []pgstore.NewJob{lj}, nil)
	p.goTo("jobs?queue=interactive")
	p.waitText("#data tbody", "cust-xxx")
	p.fits("the jobs page with a 305-character key")

	// A job that is not there is said on the page, with the way back.
	p.goTo("jobs/999999")
	p.waitText(`[data-error="404"]`, "job 999999 not found. Back to the list")
	if href := eval[string](p, `document.querySelector('[data-error] a').getAttribute('href')`); href != "#/jobs" {
		t.Errorf("the way back from a missing job is %q, want #/jobs", href)
	}
}

// TestBrowserConsoleReadTokenSeesNoActions: behind tokens the page asks
// for one; with a read token it shows every page's data and no action
// control at all, where an operate token sees them.
func TestBrowserConsoleReadTokenSeesNoActions(t *testing.T) {
	t.Parallel()
	c := newConsole(t, Config{Tokens: []Token{
		{Name: "grafana", Secret: "read-secret-4f1c", Operate: false},
		{Name: "oncall", Secret: "operate-secret-9a2e", Operate: true},
	}})
	pages := []struct{ hash, ready string }{
		{"queues", `tr[data-queue="bulk"]`},
		{"jobs", "#data tbody"},
		{fmt.Sprintf("jobs/%d", c.retryJob), `pre[data-what="payload"]`},
		{"dlq", "#data tbody"},
		{fmt.Sprintf("dlq/%d", c.deadEntry), `pre[data-what="payload"]`},
		{"lanes", "#blocked tbody"},
		{"schedules", `tr[data-schedule="hourly-export"]`},
		{"kafka", `section[data-route="orders"]`},
		{"audit", "#data tbody"},
	}
	for _, tc := range []struct {
		token   string
		actions bool
	}{{"read-secret-4f1c", false}, {"operate-secret-9a2e", true}} {
		p := openConsole(t, c.url)
		p.goTo("queues")
		p.do(chromedp.WaitVisible("#auth"))
		p.do(chromedp.SendKeys("#token", tc.token))
		p.click(`#auth button`)
		p.waitText("#who", map[bool]string{false: "grafanaread", true: "oncalloperate"}[tc.actions])
		for _, pg := range pages {
			p.goTo(pg.hash)
			p.waitText(pg.ready, "")
			p.do(chromedp.WaitVisible(pg.ready))
			n := p.count("button[data-action]")
			if tc.actions && n == 0 && pg.hash != "audit" && pg.hash != "jobs" && pg.hash != "lanes" {
				t.Errorf("an operate token sees no action on %s", pg.hash)
			}
			if !tc.actions && n != 0 {
				t.Errorf("a read token sees %d action controls on %s", n, pg.hash)
			}
		}
		if !tc.actions {
			p.goTo("queues")
			p.do(chromedp.WaitVisible(`tr[data-queue="bulk"]`))
			p.screenshot("read-only")
		}
	}
}

// rowsOf reads the rows of the table in sel as a person would tell them
// apart: a re-drive's row as "re-drive <entry>", a new run's row as "run
// again", an attempt's by its number.
func rowsOf(p *tab, sel string) string {
	p.t.Helper()
	return eval[string](p, fmt.Sprintf(`[...document.querySelectorAll(%q)].map(tr =>
		tr.dataset.redrive ? "re-drive " + tr.dataset.redrive : tr.dataset.rerun !== undefined ? "run again" : tr.cells[0].textContent).join(", ")`,
		sel+" tbody tr"))
}

// TestBrowserConsoleRunsOfAJob: a job that died, was re-driven and died
// again lists its attempts 1, 2, 3, 1, 2, 3; its page marks the re-drive
// between the runs, and the second DLQ entry, whose error history holds
// both runs and knows of no re-drive, still marks where the second run
// began.
func TestBrowserConsoleRunsOfAJob(t *testing.T) {
	t.Parallel()
	w := newWatched(t)
	st := w.store
	seed(t, st, []pgstore.NewJob{newJob("interactive", "cust-1", 1)}, nil)
	id := runToDeath(t, st, "interactive", 1, 3, "HTTP 503").ID
	first := parkedEntry(t, st, id)
	if _, err := dlq.New(st, nil, nil).Redrive(context.Background(), first, "oncall"); err != nil {
		t.Fatal(err)
	}
	runToDeath(t, st, "interactive", 1, 3, "HTTP 500")
	second := parkedEntry(t, st, id)
	p := openConsole(t, w.srv.URL)

	p.goTo(fmt.Sprintf("jobs/%d", id))
	p.waitText("#attempts", "Re-driven from the DLQ")
	if got, want := rowsOf(p, "#attempts"), fmt.Sprintf("1, 2, 3, re-drive %d, 1, 2, 3", first); got != want {
		t.Errorf("the job's attempts read %q, want %q", got, want)
	}
	if href := eval[string](p, `document.querySelector("#attempts tr[data-redrive] a").getAttribute("href")`); href != fmt.Sprintf("#/dlq/%d", first) {
		t.Errorf("the re-drive's row links %q, want its entry", href)
	}

	p.goTo(fmt.Sprintf("dlq/%d", second))
	p.waitText("section:last-child", "Run again")
	if got := rowsOf(p, "section:last-child"); got != "1, 2, 3, run again, 1, 2, 3" {
		t.Errorf("the second entry's error history reads %q, want the runs told apart", got)
	}
}

// TestBrowserConsoleAuditDetail: the audit page shows what each action
// recorded as key: value pairs, not JSON; a job id links to its job; a
// long value is cut, whole in its tooltip; and markup in a value or an
// actor's name is shown as text, never parsed.
func TestBrowserConsoleAuditDetail(t *testing.T) {
	t.Parallel()
	w := newWatched(t)
	st := w.store
	ctx := context.Background()
	const hostile = `<img src=x onerror="document.title='pwned'">`
	long := "report." + strings.Repeat("monthly-", 20) + "end"
	enqueue := func(kind, by string) int64 {
		t.Helper()
		e, err := st.JobEnqueue(ctx, pgstore.NewJob{Origin: pgstore.OriginAPI, Route: "r", Kind: kind, Queue: "bulk",
			DedupeKey: kind, Payload: []byte(`{}`), MaxAttempts: 3}, pgstore.Actor{By: by})
		if err != nil {
			t.Fatal(err)
		}
		return e.ID
	}
	marked, longJob := enqueue(hostile, "<b>mallory</b>"), enqueue(long, "oncall")
	if err := st.JobCancel(ctx, longJob, "oncall"); err != nil {
		t.Fatal(err)
	}
	seed(t, st, []pgstore.NewJob{newJob("interactive", "cust-1", 1)}, nil)
	dead := claim(t, st, "interactive", 1)[0]
	kill(t, st, dead)
	entry := parkedEntry(t, st, dead.ID)
	if _, err := dlq.New(st, nil, nil).Redrive(ctx, entry, "oncall"); err != nil {
		t.Fatal(err)
	}
	p := openConsole(t, w.srv.URL)

	p.goTo("audit")
	p.waitText("#data tbody", "mallory")
	// detail is the text of the detail cell of target's newest entry of
	// action.
	detail := func(action, target string) string {
		t.Helper()
		return eval[string](p, fmt.Sprintf(`(() => { const tr = [...document.querySelectorAll("#data tbody tr")].find(tr =>
			tr.cells[3].textContent === %q && tr.cells[4].textContent === %q); return tr ? tr.cells[5].textContent : "no such row" })()`,
			action, target))
	}
	if got, want := detail("enqueue", fmt.Sprintf("job/%d", marked)), "kind: "+hostile+" queue: bulk"; got != want {
		t.Errorf("the enqueue's detail reads %q, want %q", got, want)
	}
	if got := detail("cancel", fmt.Sprintf("job/%d", longJob)); got != "was: queued" {
		t.Errorf("the cancel's detail reads %q, want was: queued", got)
	}
	if got, want := detail("redrive", fmt.Sprintf("dlq/%d", entry)), fmt.Sprintf("job_id: %d", dead.ID); got != want {
		t.Errorf("the re-drive's detail reads %q, want %q", got, want)
	}
	if n := p.count(fmt.Sprintf(`#data .detail a[href="#/jobs/%d"]`, dead.ID)); n != 1 {
		t.Errorf("the re-drive's job id is not a link to the job (%d links)", n)
	}
	cut := eval[[]string](p, `(() => { const v = [...document.querySelectorAll('#data [data-key="kind"] bdi')].find(b => b.title);
		return v ? [v.textContent, v.title] : [] })()`)
	if len(cut) != 2 || cut[0] != long[:60]+"…" || cut[1] != long {
		t.Errorf("the long kind shows %q, want its first 60 characters and the whole in the tooltip", cut)
	}
	if got := p.text("#data tbody"); !strings.Contains(got, "<b>mallory</b>") {
		t.Errorf("the actor's name is not shown as it is: %q", got)
	}
	if n := p.count("#data img, #data b"); n != 0 {
		t.Errorf("markup from an audit entry became %d elements", n)
	}
	if title := eval[string](p, `document.title`); title != "Switchyard" {
		t.Errorf("the page's title is %q: a value ran as script", title)
	}
	p.fits("the audit page with a long value")
}

// TestBrowserConsoleLanesPages: the Lanes page pages as the other lists
// do, 50 lanes a page by the API's cursor, with its filter kept: the
// blocked lane first, then the others, and each lane on one page only.
func TestBrowserConsoleLanesPages(t *testing.T) {
	t.Parallel()
	w := newWatched(t)
	lane := &pgstore.LanePolicy{Policy: "none", OnDead: "block", GapTimeout: time.Minute, GapPolicy: "park"}
	var jobs []pgstore.NewJob
	add := func(route, key string) {
		for range 2 { // a head and one job waiting behind it
			j := newJob("ledger", key, int64(len(jobs)))
			j.Route, j.Topic, j.Lane = route, route, lane
			jobs = append(jobs, j)
		}
	}
	add("ledger", "stuck") // first: its head is the one claimed below
	for i := range 60 {
		add("ledger", fmt.Sprintf("k-%02d", i))
	}
	add("other", "elsewhere")
	seed(t, w.store, jobs, nil)
	kill(t, w.store, claim(t, w.store, "ledger", 1)[0]) // stuck's head dies: the lane is blocked
	p := openConsole(t, w.srv.URL)

	keys := func(sel string) []string {
		t.Helper()
		return eval[[]string](p, fmt.Sprintf(`[...document.querySelectorAll(%q)].map(tr => tr.cells[1].textContent)`, sel+" tbody tr"))
	}
	p.goTo("lanes?route=ledger")
	p.waitText("#blocked tbody", "stuck")
	p.waitText("#data .pager", "next page")
	if got := p.text("#data .pager"); strings.Contains(got, "first page") {
		t.Errorf("the first page offers the first page: %q", got)
	}
	first := keys("#longest")
	if n := len(keys("#blocked")); n != 1 || len(first) != 49 || first[0] != "k-00" {
		t.Fatalf("the first page has %d blocked and %d other lanes from %q, want 1 and 49 from k-00", n, len(first), first)
	}
	if href := eval[string](p, `document.querySelector("#data .pager a:last-child").getAttribute("href")`); !strings.HasPrefix(href, "#/lanes?route=ledger&after=") {
		t.Errorf("the next page's link %q does not keep the filter", href)
	}
	p.fits("the lanes page")

	p.click("#data .pager a:last-child")
	p.waitText("#data .pager", "first page")
	second := keys("#longest")
	if len(second) != 11 || second[0] != "k-49" || second[10] != "k-59" {
		t.Errorf("the second page lists %q, want k-49 to k-59", second)
	}
	if n := p.count("#blocked"); n != 0 {
		t.Errorf("the second page has a blocked lanes table, though the blocked lanes came first")
	}
	if got := p.text("#data .pager"); strings.Contains(got, "next page") {
		t.Errorf("the last page offers a next one: %q", got)
	}
	if got := p.text("#data"); strings.Contains(got, "elsewhere") {
		t.Errorf("filtered by route ledger, a page lists another route's lane: %q", got)
	}

	p.click("#data .pager a:first-child")
	p.waitText("#blocked tbody", "stuck")
	if hash := eval[string](p, `location.hash`); hash != "#/lanes?route=ledger" {
		t.Errorf("the first page's link leads to %q", hash)
	}
}

// TestBrowserConsoleNarrow: on a phone's 390 px the page itself never
// scrolls sideways: the menu wraps, so that every page can be reached,
// and a wide table scrolls within its own box.
func TestBrowserConsoleNarrow(t *testing.T) {
	t.Parallel()
	c := newConsole(t, Config{})
	p := openConsoleAt(t, c.url, 390, 844)

	for _, pg := range []struct{ hash, ready string }{
		{"queues", `tr[data-queue="interactive"]`},
		{"dlq", "#data tbody"},
		{fmt.Sprintf("jobs/%d", c.retryJob), `pre[data-what="payload"]`},
	} {
		p.goTo(pg.hash)
		p.waitText(pg.ready, "")
		p.do(chromedp.WaitVisible(pg.ready))
		p.fits("the " + pg.hash + " page at 390 px")
		if off := eval[[]string](p, `[...document.querySelectorAll("header a, header input")].filter(a => {
			const r = a.getBoundingClientRect(); return r.right > innerWidth || r.left < 0 }).map(a => a.textContent || a.id)`); len(off) != 0 {
			t.Errorf("on %s at 390 px, %q lie outside the window", pg.hash, off)
		}
	}
	// The queues' table is wider than a phone: its box scrolls, and the
	// actions at its right end are reached by scrolling it.
	p.goTo("queues")
	p.do(chromedp.WaitVisible(`tr[data-queue="interactive"]`))
	if !eval[bool](p, `(() => { const b = document.querySelector("#data .scroll"); return !!b && b.scrollWidth > b.clientWidth })()`) {
		t.Errorf("the queues' table at 390 px is not in a box of its own that scrolls")
	}
}

// TestBrowserConsoleServerDown: when the API stops answering, the page
// says so where the data is, and marks what it still shows as stale
// rather than letting it pass for live; when the API is back, so is the
// page.
func TestBrowserConsoleServerDown(t *testing.T) {
	t.Parallel()
	st := newStore(t, true)
	seedJobAndEntry(t, st)
	h := New(Config{DLQ: dlq.New(st, nil, nil)}, st, zaptest.NewLogger(t)).Handler()
	// While down, the API answers as a process that is gone would not:
	// the connection closes with no answer.
	var mu sync.Mutex
	down := false
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		d := down
		mu.Unlock()
		if d && strings.HasPrefix(r.URL.Path, "/v1/") {
			if conn, _, err := rw.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
				return
			}
		}
		h.ServeHTTP(rw, r)
	}))
	t.Cleanup(srv.Close)
	set := func(d bool) { mu.Lock(); down = d; mu.Unlock() }
	p := openConsole(t, srv.URL)

	p.goTo("queues")
	p.waitText(`tr[data-queue="bulk"]`, "bulk")
	p.unreachable.Store(true)
	set(true)
	p.waitText("#status", "not answering")
	if !eval[bool](p, `document.getElementById("status").classList.contains("error") && document.getElementById("data").classList.contains("stale")`) {
		t.Errorf("with the API down, the status line is not an error or the data is not marked stale: %q", p.text("#status"))
	}
	if got := p.text("#status"); !strings.Contains(got, "last answer") {
		t.Errorf("the status line does not say how old what shows is: %q", got)
	}
	set(false)
	p.waitText("#status", "Updated")
	if eval[bool](p, `document.getElementById("status").classList.contains("error") || document.getElementById("data").classList.contains("stale")`) {
		t.Errorf("with the API back, the page still says it is down")
	}
}

// TestBrowserConsolePollKeepsFocusAndSelection: a poll renders the page
// again every 2 s; a keyboard user's focus on a row's button and text
// selected to copy (an error, a payload) outlive it.
func TestBrowserConsolePollKeepsFocusAndSelection(t *testing.T) {
	t.Parallel()
	w := newWatched(t)
	seedJobAndEntry(t, w.store)
	p := openConsole(t, w.srv.URL)
	// poll waits for the page's next poll: the status line's time moves.
	poll := func() {
		t.Helper()
		before := p.text("#status")
		if !testenv.Until(20*time.Second, func() bool { return p.text("#status") != before }) {
			t.Fatalf("no poll within 20 s: the status line stayed %q", before)
		}
	}

	p.goTo("dlq")
	p.do(chromedp.WaitVisible(`tr[data-entry="1"] button[data-action="redrive"]`))
	p.do(chromedp.Focus(`tr[data-entry="1"] button[data-action="redrive"]`))
	poll()
	poll()
	if got := eval[string](p, `(() => { const a = document.activeElement; const tr = a.closest("tr");
		return a.tagName + " " + (a.dataset.action || "") + " " + (tr ? tr.dataset.entry : "") })()`); got != "BUTTON redrive 1" {
		t.Errorf("after a poll the focus is on %q, want entry 1's re-drive button", got)
	}

	p.goTo("jobs/2")
	p.waitText("#attempts", "HTTP 422: bad order")
	if got := eval[string](p, `(() => { const td = [...document.querySelectorAll("#attempts td")].find(td => td.textContent === "HTTP 422: bad order");
		getSelection().selectAllChildren(td); return getSelection().toString() })()`); got != "HTTP 422: bad order" {
		t.Fatalf("selected %q", got)
	}
	poll()
	if got := eval[string](p, `getSelection().toString()`); got != "HTTP 422: bad order" {
		t.Errorf("after a poll the selection is %q, want the error still selected", got)
	}
	if got := p.text("#status"); !strings.Contains(got, "updates wait while text is selected") {
		t.Errorf("holding the page for a selection, the status line says %q", got)
	}
	// Once the selection ends, the page is live again.
	eval[bool](p, `(getSelection().removeAllRanges(), true)`)
	p.waitText("#status", "Updated")
}
