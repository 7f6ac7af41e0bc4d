package browsertest

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/chromedp/chromedp"
)

// Env names the environment variable that holds another Chromium's path.
const Env = "TQW_CHROMIUM"

// Chromium returns the path of the Chromium to drive, skipping t (failing
// it under CI) when there is none.
func Chromium(t testing.TB) string {
	t.Helper()
	p := os.Getenv(Env)
	if p == "" {
		p = "/usr/bin/chromium"
	}
	if _, err := os.Stat(p); err != nil {
		msg := fmt.Sprintf("browser test: no Chromium at %s (scripts/tools.sh installs Debian's chromium; %s names another): %v", p, Env, err)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

// Tab starts a headless Chromium for t, with a fresh profile, and returns
// a chromedp context on its first tab; the browser ends with ctx or when
// t ends. opts add to the allocator's options (a window size, say).
func Tab(t testing.TB, ctx context.Context, opts ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	all := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(Chromium(t)),
		chromedp.NoSandbox, // the test machines run as root
		chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, append(all, opts...)...)
	tab, cancelTab := chromedp.NewContext(allocCtx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	return tab
}
