package human

import "testing"

// TestSize pins how sizes read in what the model sees. go-humanize's IBytes, which
// could replace Size, writes differently from ten units up ("195 KiB", "48 MiB"),
// rounds differently ("18 KiB" for 18,943 bytes) and has no "unknown".
func TestSize(t *testing.T) {
	for n, want := range map[int64]string{
		-1: "unknown", 0: "0 B", 9: "9 B", 512: "512 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB",
		10 << 10: "10.0 KiB", 18943: "18.5 KiB", 200_000: "195.3 KiB", 48 << 20: "48.0 MiB", 3 << 30: "3.0 GiB",
		2 << 40: "2.0 TiB",
	} {
		if got := Size(n); got != want {
			t.Errorf("Size(%d) = %q, want %q", n, got, want)
		}
	}
}
