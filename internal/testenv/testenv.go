// Package testenv holds what the tests of this module share that needs no engine: a
// proxy that counts connections ([CountingProxy]), a test CA, polling, and small
// measuring and reading helpers, so that the tests of packages that never touch an
// engine link none. The engines themselves are package testengine's. Only tests
// import it.
package testenv

import (
	"archive/zip"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"io"
	"runtime"
	"testing"
	"time"
)

// RandomHex returns n random bytes in hex, for names no other test run uses.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// HeapPeak samples the heap in use every interval until stop is called, and stop
// returns the largest growth seen over what was in use at the start (after a GC).
func HeapPeak(every time.Duration) (stop func() uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak uint64
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > base && ms.HeapInuse-base > peak {
				peak = ms.HeapInuse - base
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 { close(done); <-finished; return peak }
}

// ZipEntry is an entry of a zip archive with its content.
type ZipEntry struct {
	*zip.File
	Data []byte
}

// ReadZip reads every entry of the zip archive data, in the archive's order, and
// fails the test when data is not a zip archive or an entry does not read.
func ReadZip(tb testing.TB, data []byte) []ZipEntry {
	tb.Helper()
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		tb.Fatalf("not a zip archive: %v", err)
	}
	out := make([]ZipEntry, 0, len(zr.File))
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			tb.Fatalf("%s: %v", f.Name, err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			tb.Fatalf("%s: %v", f.Name, err)
		}
		out = append(out, ZipEntry{File: f, Data: b})
	}
	return out
}
