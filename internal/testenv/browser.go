package testenv

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/chromedp/chromedp"
)

// Chromium returns the headless Chromium to drive (SWITCHYARD_CHROMIUM,
// else chromium on PATH), or fails the test saying how to get one:
// `make test` installs Debian's with deploy/local/chromium.sh.
func Chromium(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("SWITCHYARD_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium found: run `make test`, or `deploy/local/chromium.sh ensure`, or set SWITCHYARD_CHROMIUM")
	return ""
}

// Browser starts a headless Chromium of its own (a fresh profile, no
// network beyond what the test serves) and returns a context to drive it
// with chromedp; it is closed when the test ends. extra are more
// command-line flags, e.g. chromedp.Flag("host-resolver-rules", …).
func Browser(t testing.TB, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	opts := append(append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(Chromium(t)),
		chromedp.Headless,
		chromedp.NoSandbox, // the tests run as root in CI
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		// This machine's network is closed: without these Chromium keeps
		// trying to reach Google's services.
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
	), extra...)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	// Start the browser now, so that a failure to start is reported here.
	// The browser lives as long as the context of this first call, which
	// therefore has no timeout of its own.
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		cancelAlloc()
		t.Fatalf("start chromium: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	return ctx
}
