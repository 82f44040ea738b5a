package sandbox

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// TestDialPort relays HTTP to busybox httpd on the loopback of a container with no
// network: a refused port is ErrNoListener, an open one carries requests both ways,
// keeps a connection alive for several requests, and half-closing still gets the
// answer. No relay is left running afterwards.
func TestDialPort(t *testing.T) {
	cli := dockerClient(t)
	sb := newTestSandbox(t, cli, testConfig(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	if _, err := sb.DialPort(ctx, 0); err == nil {
		t.Fatal("port 0 accepted")
	}
	if _, err := sb.DialPort(ctx, 8000); !errors.Is(err, boxapi.ErrNoListener) {
		t.Fatalf("no listener yet: got %v, want ErrNoListener", err)
	}
	res := mustExec(t, sb, `mkdir -p /srv/w && echo hello > /srv/w/index.html && busybox httpd -p 127.0.0.1:8000 -h /srv/w && sleep 0.2`, boxapi.ExecOptions{})
	if res.ExitCode != 0 {
		t.Fatalf("starting httpd: %+v", res)
	}

	conn, err := sb.DialPort(ctx, 8000)
	if err != nil {
		t.Fatalf("DialPort: %v", err)
	}
	br := bufio.NewReader(conn)
	for i := 0; i < 3; i++ {
		// busybox httpd closes after each answer, so one request per connection.
		if i > 0 {
			conn.Close()
			if conn, err = sb.DialPort(ctx, 8000); err != nil {
				t.Fatal(err)
			}
			br = bufio.NewReader(conn)
		}
		req, _ := http.NewRequest("GET", "http://x/index.html", nil)
		if err := req.Write(conn); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			t.Fatalf("reading response %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "hello\n" {
			t.Fatalf("response %d: %d %q", i, resp.StatusCode, body)
		}
	}
	conn.Close()

	// Half-close: the request, then EOF on our side; the answer still arrives in full.
	conn, err = sb.DialPort(ctx, 8000)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, "GET /index.html HTTP/1.0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if err := conn.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	all, err := io.ReadAll(conn)
	if err != nil || !strings.HasSuffix(string(all), "\r\n\r\nhello\n") {
		t.Fatalf("after half-close: %q, %v", all, err)
	}
	conn.Close()

	// Every relay has exited (the server closed each connection).
	deadline := time.Now().Add(10 * time.Second)
	for {
		res := mustExec(t, sb, `ps -o pid,args | grep -c '[r]elay' || true`, boxapi.ExecOptions{})
		if strings.TrimSpace(res.Stdout) == "0" {
			break
		}
		if time.Now().After(deadline) {
			out := mustExec(t, sb, `ps -o pid,args`, boxapi.ExecOptions{})
			t.Fatalf("relays still running:\n%s", out.Stdout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
