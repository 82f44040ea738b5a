package testsite

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
)

// TestListenersCountsReusePortSockets: the reload wait sees both sockets of a port
// bound twice with SO_REUSEPORT, as Caddy binds a port across a reload.
func TestListenersCountsReusePortSockets(t *testing.T) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, 0xf, 1) // SO_REUSEPORT on Linux
		})
		return errors.Join(err, serr)
	}}
	a, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	port := a.Addr().(*net.TCPAddr).Port
	b, err := lc.Listen(context.Background(), "tcp", a.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if n := Listeners(port); n != 2 {
		t.Fatalf("%d listeners on port %d, want 2", n, port)
	}
	b.Close()
	if n := Listeners(port); n != 1 {
		t.Fatalf("%d listeners on port %d after closing one, want 1", n, port)
	}
}

// TestCaddyfileOptions: each option lands where its comment says, and the defaults
// keep test sandboxes off the network on one CPU.
func TestCaddyfileOptions(t *testing.T) {
	s := &Site{Port: 4321, Key: "k", Container: "c", Volume: "v", Storage: "/st"}
	def := s.Caddyfile(Options{})
	for _, want := range []string{"\nhttp://127.0.0.1:4321 {", "network none", "cpus 1", "api_key k", "container c", "volume v", "storage file_system /st"} {
		if !strings.Contains(def, want) {
			t.Errorf("default Caddyfile lacks %q:\n%s", want, def)
		}
	}
	got := s.Caddyfile(Options{Image: "img", Network: "bridge", CPUs: "2", Directive: []string{"agent off"}, Site: []string{"header X 1"}, CatchAll: true})
	for _, want := range []string{"\nhttp://:4321 {", "image img", "network bridge", "cpus 2", "\t\tagent off\n", "\theader X 1\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("Caddyfile lacks %q:\n%s", want, got)
		}
	}
	if got := s.Caddyfile(Options{Address: "https://x.localhost:%d"}); !strings.Contains(got, "\nhttps://x.localhost:4321 {") {
		t.Errorf("address not used:\n%s", got)
	}
}

// TestMetricSum: samples are matched by name and labels, escapes in values are read,
// and a metric whose name only begins with the asked name is not counted.
func TestMetricSum(t *testing.T) {
	const text = `# HELP caddy_x_total x
# TYPE caddy_x_total counter
caddy_x_total{host="a.test",person="alice"} 2
caddy_x_total{host="b\"q\\.test",person="alice"} 3
caddy_x_total{host="a.test",person="bob"} 5
caddy_x_total_more{person="alice"} 100
caddy_y 7
`
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
		found  bool
	}{
		{"caddy_x_total", nil, 10, true},
		{"caddy_x_total", map[string]string{"person": "alice"}, 5, true},
		{"caddy_x_total", map[string]string{"host": `b"q\.test`}, 3, true},
		{"caddy_x_total", map[string]string{"person": "carol"}, 0, false},
		{"caddy_y", nil, 7, true},
		{"caddy_z", nil, 0, false},
	} {
		if got, found := MetricSum(text, tc.name, tc.labels); got != tc.want || found != tc.found {
			t.Errorf("MetricSum(%s, %v) = %v %v, want %v %v", tc.name, tc.labels, got, found, tc.want, tc.found)
		}
	}
}
