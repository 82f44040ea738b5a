package config_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/config"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
)

// TestTaskSettingsCaddyfile: max_tasks takes one or two numbers, max_task_ttl a
// duration of at least a second; anything else fails with a message that says so.
func TestTaskSettingsCaddyfile(t *testing.T) {
	adapt := func(body string) (string, error) {
		cf := "localhost {\n\tmcp_sandbox {\n\t\tapi_key {env.K}\n\t\t" + body + "\n\t}\n}\n"
		out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cf), nil)
		return string(out), err
	}
	for _, tc := range []struct{ body, want string }{
		{"max_tasks", "max_tasks takes one or two numbers"},
		{"max_tasks 1 2 3", "max_tasks takes one or two numbers"},
		{"max_tasks 0", `max_tasks: "0" is not a whole number of at least 1`},
		{"max_tasks 10 lots", `max_tasks: "lots" is not a whole number`},
		{"max_tasks 10\n\t\tmax_tasks 20", "duplicate subdirective max_tasks"},
		{"max_task_ttl 0", "max_task_ttl: must be at least 1s"},
		{"max_task_ttl 500ms", "max_task_ttl: must be at least 1s"},
		{"max_task_ttl soon", `max_task_ttl: "soon" is not a duration`},
	} {
		if _, err := adapt(tc.body); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want an error containing %q", tc.body, err, tc.want)
		}
	}
	// One number sets the count per session only.
	out, err := adapt("max_tasks 50")
	if err != nil || !strings.Contains(out, `"max_tasks":50`) || strings.Contains(out, "max_tasks_total") {
		t.Errorf("max_tasks 50: %v %s", err, out)
	}
}

// TestTaskSettingsValidate: a total below the count per session, or a ttl under a
// second, is a configuration error naming the setting.
func TestTaskSettingsValidate(t *testing.T) {
	const key = "a-long-enough-test-key-0123456789"
	for _, tc := range []struct {
		h    *config.Settings
		want string
	}{
		{&config.Settings{APIKey: key, MaxTasks: 10, MaxTasksTotal: 5}, "max_tasks: the number in all (5) must be at least the number per session (10)"},
		{&config.Settings{APIKey: key, MaxTasks: -1}, "max_tasks must be positive"},
		{&config.Settings{APIKey: key, MaxTaskTTL: caddy.Duration(time.Millisecond)}, "max_task_ttl must be at least 1s"},
	} {
		if err := tc.h.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want an error containing %q", err, tc.want)
		}
	}
	if err := (&config.Settings{APIKey: key, MaxTasks: 2000, MaxTaskTTL: caddy.Duration(time.Second)}).Validate(); err != nil {
		t.Errorf("max_tasks 2000 alone (the total defaults to it): %v", err)
	}
}

// TestTaskDefaultsDocumented: the configuration reference's Caddyfile block, UnmarshalCaddyfile's doc
// comment and the Settings' field comments state the task defaults the code applies.
func TestTaskDefaultsDocumented(t *testing.T) {
	ttl := human.Duration(config.DefaultMaxTaskTTL)
	ttlLine := regexp.MustCompile(`(?m)^\W*max_task_ttl\s+<duration>\s+# default: ` + regexp.QuoteMeta(ttl) + `;`)
	tasksLine := regexp.MustCompile(fmt.Sprintf(`(?m)^\W*max_tasks\s+<n> \[<in all>\]\s+# default: %d MCP tasks per session, %d in all$`, config.DefaultMaxTasks, config.DefaultTasksTotal))
	for _, f := range []string{"../../docs/configuration.md", "caddyfile.go"} {
		b := string(readFile(t, f))
		if !ttlLine.MatchString(b) || !tasksLine.MatchString(b) {
			t.Errorf("%s does not state max_task_ttl %s and max_tasks %d / %d in its Caddyfile syntax", f, ttl, config.DefaultMaxTasks, config.DefaultTasksTotal)
		}
	}
	h := string(readFile(t, "settings.go"))
	for _, want := range []string{
		"none, is cut to it. Default: " + ttl + ".",
		fmt.Sprintf("one session holds. Default: %d.", config.DefaultMaxTasks),
		fmt.Sprintf("across sessions. Default: %d (or", config.DefaultTasksTotal),
	} {
		if !strings.Contains(h, want) {
			t.Errorf("settings.go's field comments lack %q", want)
		}
	}
}
