package links

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/audit"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
)

// endlessFiles serves one huge file whose bytes never end, and says when the download
// let go of it.
type endlessFiles struct{ closed chan struct{} }

func (f endlessFiles) Stat(_ context.Context, p string) (boxapi.FileInfo, error) {
	return boxapi.FileInfo{Path: p, Name: "big.bin", Size: 1 << 40, ModTime: time.Unix(1, 0), Mode: 0o644}, nil
}

func (f endlessFiles) OpenRange(_ context.Context, p string, _, _ int64) (*boxapi.File, error) {
	info, _ := f.Stat(context.Background(), p)
	return &boxapi.File{ReadCloser: &endless{closed: f.closed}, FileInfo: info}, nil
}

func (endlessFiles) WriteZip(context.Context, string, io.Writer) error { return errors.ErrUnsupported }
func (endlessFiles) ListFiles(context.Context, string, int) ([]boxapi.DirEntry, error) {
	return nil, errors.ErrUnsupported
}
func (endlessFiles) Upload(context.Context, string, string, io.Reader, boxapi.UploadOptions) (boxapi.UploadResult, error) {
	return boxapi.UploadResult{}, errors.ErrUnsupported
}

type endless struct{ closed chan struct{} }

func (e *endless) Read(p []byte) (int, error) { clear(p); return len(p), nil }
func (e *endless) Close() error               { close(e.closed); return nil }

type noAudit struct{}

func (noAudit) Record(audit.Entry) {}

// TestStalledDownloadLetsGo: a client that asks for a file and never reads holds the
// file's stream (in a sandbox: a stream of its agent channel) only until one write has
// waited stallTimeout, not for good.
func TestStalledDownloadLetsGo(t *testing.T) {
	old := stallTimeout
	stallTimeout = 500 * time.Millisecond
	t.Cleanup(func() { stallTimeout = old })

	files := endlessFiles{closed: make(chan struct{})}
	signer := NewSigner("stalled-download-test-key-0123456789")
	srv := httptest.NewServer(New(Options{
		Signer:    signer,
		FilesOf:   func(context.Context, string) (Files, error) { return files, nil },
		MaxUpload: 1 << 20,
		Revoked:   func(string) bool { return false },
		Audit:     noAudit{},
		Origin:    func(*http.Request) string { return "http://127.0.0.1" },
		ClientIP:  func(*http.Request) string { return "127.0.0.1" },
		Logger:    zap.NewNop(),
	}))
	defer srv.Close()

	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A small receive buffer, so the server's writes block soon.
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	link := signer.Download("/sandbox/big.bin", time.Now(), time.Hour).Path
	if _, err := io.WriteString(conn, "GET "+link+" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("download: %v %v", err, resp)
	}
	// Read nothing more: the download must give the file up by itself.
	select {
	case <-files.closed:
	case <-time.After(30 * time.Second):
		t.Fatal("a download whose client stopped reading still holds its file after 30 s")
	}
}
