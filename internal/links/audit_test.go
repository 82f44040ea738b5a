package links

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/audit"
)

// keptAudit keeps what it is given.
type keptAudit struct {
	mu sync.Mutex
	e  []audit.Entry
}

func (k *keptAudit) Record(e audit.Entry) { k.mu.Lock(); k.e = append(k.e, e); k.mu.Unlock() }

// A download link whose signature does not hold is logged as forged and under nobody,
// never under the person it names; a link that holds (here expired) is logged under
// its person.
func TestForgedDownloadUnattributed(t *testing.T) {
	signer := NewSigner("a-long-enough-test-key-0123456789")
	log := &keptAudit{}
	s := New(Options{
		Signer: signer, MaxUpload: 1 << 20, Revoked: func(string) bool { return false },
		Audit: log, Logger: zap.NewNop(),
		Origin: func(*http.Request) string { return "https://sandbox.example" }, ClientIP: func(*http.Request) string { return "127.0.0.1" },
	})
	expired := signer.As("alice").Download("/sandbox/a.txt", time.Now().Add(-2*time.Hour), time.Hour).Path
	forged := strings.Replace(expired, "/sandbox/a.txt", "/sandbox/b.txt", 1)
	for _, p := range []string{forged, expired} {
		s.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, p, nil))
	}
	if len(log.e) != 2 {
		t.Fatalf("%d entries", len(log.e))
	}
	if e := log.e[0]; e.Person != "" || !strings.Contains(e.Args, `"forged":"true"`) || e.Outcome != audit.OutcomeDenied {
		t.Errorf("forged link: %+v", e)
	}
	if e := log.e[1]; e.Person != "alice" || strings.Contains(e.Args, "forged") || e.Outcome != audit.OutcomeDenied {
		t.Errorf("expired link: %+v", e)
	}
}
