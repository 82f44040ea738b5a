// Package origin is the one rule for the origins the settings name (public_url,
// allowed_origins): shared by the settings, which check them, and the OAuth server,
// which speaks for one.
package origin

import (
	"fmt"
	"net/url"
	"strings"
)

// Parse checks that raw is an origin, "http(s)://host[:port]" with nothing after the
// host but an optional "/", and returns it with scheme and host in lower case.
func Parse(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err == nil {
		u.Scheme = strings.ToLower(u.Scheme)
	}
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.Opaque != "" ||
		strings.ContainsAny(raw, "#? \t") {
		return "", fmt.Errorf("%q must be an origin like https://sandbox.example.com (scheme and host, no path)", raw)
	}
	return u.Scheme + "://" + strings.ToLower(u.Host), nil
}
