package testenv

import (
	"archive/zip"
	"bytes"
	"testing"
	"time"
)

func TestReadZip(t *testing.T) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, name := range []string{"a/", "a/b.txt"} {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if name == "a/b.txt" {
			_, _ = w.Write([]byte("hello"))
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	got := ReadZip(t, buf.Bytes())
	if len(got) != 2 || got[0].Name != "a/" || !got[0].Mode().IsDir() || got[1].Name != "a/b.txt" || string(got[1].Data) != "hello" {
		t.Fatalf("ReadZip = %+v", got)
	}
}

func TestHeapPeakSeesAnAllocation(t *testing.T) {
	stop := HeapPeak(time.Millisecond)
	b := make([]byte, 64<<20)
	for i := range b {
		b[i] = 1
	}
	time.Sleep(20 * time.Millisecond)
	peak := stop()
	if peak < 32<<20 {
		t.Errorf("peak %d bytes, want at least the 64 MiB held", peak)
	}
	_ = b[len(b)-1]
}

func TestRandomHex(t *testing.T) {
	if a, b := RandomHex(4), RandomHex(4); len(a) != 8 || a == b {
		t.Errorf("RandomHex(4) = %q, %q", a, b)
	}
}
