// Package human writes sizes, durations and long strings the way people (and models)
// read them. Every text the plugin shows uses it, so a size reads the same everywhere.
package human

import (
	"fmt"
	"strings"
	"time"
)

// Size writes a byte count in binary units: 512 B, 1.5 KiB, 3.0 GiB; "unknown" when
// negative.
func Size(n int64) string {
	if n < 0 {
		return "unknown"
	}
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// Duration writes d in the largest whole unit that divides it (7d, 24h, 30m), else as
// time.Duration does.
func Duration(d time.Duration) string {
	switch {
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}

// Clip cuts s to at most n bytes, never inside a UTF-8 sequence, and marks the cut
// with an ellipsis.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
