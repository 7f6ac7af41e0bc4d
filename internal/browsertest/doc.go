// Package browsertest gives browser tests a headless Chromium driven by
// chromedp: Debian's chromium (scripts/tools.sh installs it), or the
// binary TQW_CHROMIUM names. Without one a test is skipped, and fails
// under CI, where a missing browser means a broken install step, not a
// test to pass silently. It makes no object-store request.
package browsertest
