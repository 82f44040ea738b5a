package sandbox

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseMemory(t *testing.T) {
	for in, want := range map[string]int64{
		"3g":         3 << 30,
		"3G":         3 << 30,
		"3GB":        3 << 30,
		"3GiB":       3 << 30,
		"3 gib":      3 << 30,
		"512m":       512 << 20,
		"512MB":      512 << 20,
		"1.5g":       3 << 29,
		"1024k":      1 << 20,
		"1073741824": 1 << 30,
		"100b":       100,
		"1t":         1 << 40,
		" 64m ":      64 << 20,
	} {
		got, err := ParseMemory(in)
		if err != nil || got != want {
			t.Errorf("ParseMemory(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "abc", "-1g", "0", "0g", "g", "1x", "1.2.3g", "3gg", "99999999999999999999", "9999999t", ".g"} {
		if got, err := ParseMemory(in); err == nil {
			t.Errorf("ParseMemory(%q) = %d, want an error", in, got)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"empty image", func(c *Config) { c.Image = "" }, "image is empty"},
		{"image with space", func(c *Config) { c.Image = "a b" }, "whitespace"},
		{"empty container", func(c *Config) { c.Container = "" }, "container \""},
		{"bad container", func(c *Config) { c.Container = "has/slash" }, "container \""},
		{"empty volume", func(c *Config) { c.Volume = "" }, "volume \""},
		{"bad volume", func(c *Config) { c.Volume = "-x" }, "volume \""},
		{"negative memory", func(c *Config) { c.Memory = -1 }, "memory"},
		{"tiny memory", func(c *Config) { c.Memory = 1 << 20 }, "memory"},
		{"zero cpus", func(c *Config) { c.CPUs = 0 }, "cpus"},
		{"negative cpus", func(c *Config) { c.CPUs = -2 }, "cpus"},
		{"NaN cpus", func(c *Config) { c.CPUs = math.NaN() }, "cpus"},
		{"zero pids", func(c *Config) { c.PidsLimit = 0 }, "pids_limit"},
		{"zero exec timeout", func(c *Config) { c.ExecTimeout = 0 }, "exec_timeout"},
		{"negative exec timeout", func(c *Config) { c.ExecTimeout = -time.Second }, "exec_timeout"},
		{"small max output", func(c *Config) { c.MaxOutput = 100 }, "max_output"},
		{"negative ttl", func(c *Config) { c.FileTTL = -time.Hour }, "file_ttl"},
		{"negative interval", func(c *Config) { c.CleanupInterval = -time.Hour }, "cleanup_interval"},
		{"zero interval with ttl", func(c *Config) { c.CleanupInterval = 0 }, "cleanup_interval must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.change(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
			if _, err := New(dummyClient(t), c, nil); err == nil {
				t.Errorf("New accepted the invalid config")
			}
		})
	}

	ok := DefaultConfig()
	ok.FileTTL, ok.CleanupInterval = 0, 0 // cleanup disabled: no interval needed
	if err := ok.Validate(); err != nil {
		t.Errorf("TTL 0, interval 0: %v", err)
	}

	bad := DefaultConfig()
	bad.Image, bad.MaxOutput = "", 1
	err := bad.Validate()
	if err == nil || !strings.Contains(err.Error(), "image") || !strings.Contains(err.Error(), "max_output") {
		t.Errorf("want every problem reported at once, got %v", err)
	}
	if !errors.Is(err, errConfigInvalid) {
		t.Errorf("error does not wrap errConfigInvalid")
	}
}

func TestNewDoesNoIO(t *testing.T) {
	// A client pointing nowhere: New must still succeed, since it only validates.
	sb, err := New(dummyClient(t), DefaultConfig(), nil)
	if err != nil || sb.Config() != DefaultConfig() {
		t.Fatalf("New: %v", err)
	}
	if _, err := New(nil, DefaultConfig(), nil); err == nil {
		t.Error("New accepted a nil client")
	}
}

// With an egress proxy, commands get the proxy variables with their job id as the
// proxy's user name; without one, nothing.
func TestProxyEnv(t *testing.T) {
	cfg := DefaultConfig()
	if env := cfg.proxyEnv("j0123456789ab"); env != nil {
		t.Fatalf("without a proxy: %q", env)
	}
	cfg.ProxyPort, cfg.CABundle = 3128, "/b.pem"
	env := strings.Join(cfg.proxyEnv("j0123456789ab"), " ")
	for _, want := range []string{"HTTP_PROXY=http://j0123456789ab:x@127.0.0.1:3128", "http_proxy=http://j0123456789ab:x@127.0.0.1:3128",
		"HTTPS_PROXY=", "https_proxy=", "ALL_PROXY=", "all_proxy=", "NO_PROXY=localhost,127.0.0.1", "no_proxy=", "NODE_USE_ENV_PROXY=1",
		"SSL_CERT_FILE=/b.pem", "REQUESTS_CA_BUNDLE=/b.pem", "NODE_EXTRA_CA_CERTS=/b.pem", "GIT_SSL_CAINFO=/b.pem"} {
		if !strings.Contains(env, want) {
			t.Errorf("%s missing from %s", want, env)
		}
	}
}
