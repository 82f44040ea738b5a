package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/browsertest"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testsite"
)

// newUploadBrowser is the browser of the upload page tests.
func newUploadBrowser(t *testing.T) context.Context {
	t.Helper()
	return browsertest.New(t, 900, 900, 3*time.Minute)
}

// TestUploadPageInBrowser uploads two files through the page in headless chromium
// (the page's own script, under its CSP): the progress bars move, the page says when
// both are in, lists them, and their SHA-256 inside the sandbox match. Screenshots of
// the page before, during and after, and on a phone-sized screen, go to
// testdata/artifacts/.
func TestUploadPageInBrowser(t *testing.T) {
	s := testsite.Start(t, testsite.Options{})
	ctx := context.Background()
	link := uploadLinkFor(ctx, t, s, map[string]any{"directory": "/sandbox/uploads"})["url"].(string)

	// A big file keeps the first upload running long enough to be seen in progress.
	dir := t.TempDir()
	big := filepath.Join(dir, "survey results 2026.csv")
	bigSum := writeRandomFile(t, big, 400<<20)
	small := filepath.Join(dir, "notes-ü.txt")
	text := []byte("Questions for the analysis:\n1. trend by region\n2. outliers\n")
	if err := os.WriteFile(small, text, 0o644); err != nil {
		t.Fatal(err)
	}
	smallSum := sha256.Sum256(text)

	b := newUploadBrowser(t)
	if _, err := chromedp.Run(b, chromedp.Navigate(link)); err != nil {
		t.Fatalf("opening the page: %v", err)
	}
	if _, err := chromedp.Run(b, chromedp.Poll[bool](`document.getElementById('list-note').textContent === 'No files yet.'`,
		chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("the page's script did not list the empty directory: %v", err)
	}
	browsertest.Screenshot(t, b, "upload-page-before.png")

	// Keyboard: the first Tab reaches the file input, whose label is the visible button.
	if err := chromedp.Do(b, chromedp.KeyEvent(kb.Tab)); err != nil {
		t.Fatal(err)
	}
	if id, err := chromedp.Run(b, chromedp.Evaluate[string](`document.activeElement.id`)); err != nil || id != "files" {
		t.Errorf("Tab focuses %q (%v), want the file input", id, err)
	}

	if err := chromedp.Do(b, chromedp.SetUploadFiles("#files", []string{big, small})); err != nil {
		t.Fatalf("choosing files: %v", err)
	}
	// During: the first bar has moved but not finished.
	if _, err := chromedp.Run(b, chromedp.Poll[bool](`(() => { const p = document.querySelector('#queue progress');
		return !!p && p.value > p.max * 0.02 && p.value < p.max * 0.85; })()`,
		chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(60*time.Second))); err != nil {
		t.Fatalf("never saw the first upload in progress: %v", err)
	}
	browsertest.Screenshot(t, b, "upload-page-during.png")
	state, _ := chromedp.Run(b, chromedp.Text("#queue li .state"))
	t.Logf("during: %s", state)

	if _, err := chromedp.Run(b, chromedp.Poll[bool](`document.getElementById('status').textContent.startsWith('All 2 files are in')`,
		chromedp.WithPollingTimeout(2*time.Minute))); err != nil {
		st, _ := chromedp.Run(b, chromedp.Text("#status"))
		q, _ := chromedp.Run(b, chromedp.Text("#queue"))
		t.Fatalf("uploads did not finish: %v; status %q; queue %q", err, st, q)
	}
	if _, err := chromedp.Run(b, chromedp.Poll[bool](`document.querySelectorAll('#list tbody tr').length === 2`,
		chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Errorf("the list does not show the two files: %v", err)
	}
	browsertest.Screenshot(t, b, "upload-page-after.png")
	queue, _ := chromedp.Run(b, chromedp.Text("#queue"))
	if !strings.Contains(queue, "Saved /sandbox/uploads/survey results 2026.csv") || !strings.Contains(queue, "Saved /sandbox/uploads/notes-ü.txt") {
		t.Errorf("per-file messages: %q", queue)
	}

	got := s.ContainerExec("cd /sandbox/uploads && sha256sum 'survey results 2026.csv' 'notes-ü.txt' && ls -A")
	if !strings.Contains(got, bigSum+"  survey results 2026.csv") || !strings.Contains(got, hex.EncodeToString(smallSum[:])+"  notes-ü.txt") ||
		strings.Contains(got, ".mcp-upload") {
		t.Errorf("in the sandbox:\n%s", got)
	}

	// The same file again is kept apart, and the page says so.
	if err := chromedp.Do(b, chromedp.SetUploadFiles("#files", []string{small})); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(b, chromedp.Poll[bool](`document.querySelectorAll('#queue li.ok').length === 3`,
		chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatalf("third upload: %v", err)
	}
	last, _ := chromedp.Run(b, chromedp.Text("#queue li:last-child .state"))
	if !strings.Contains(last, "notes-ü (1).txt") || !strings.Contains(last, "nothing was overwritten") {
		t.Errorf("renamed upload message: %q", last)
	}

	// On a phone-sized screen.
	if err := chromedp.Do(b, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(b, chromedp.Reload()); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(b, chromedp.Poll[bool](`document.querySelectorAll('#list tbody tr').length === 3`,
		chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Errorf("phone: the list does not show the files: %v", err)
	}
	if w, err := chromedp.Run(b, chromedp.Evaluate[float64](`document.documentElement.scrollWidth`)); err != nil || w > 390 {
		t.Errorf("phone: the page is %v px wide (%v), wider than the screen", w, err)
	}
	browsertest.Screenshot(t, b, "upload-page-phone.png")
}
