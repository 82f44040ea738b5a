package mcpsandbox

import (
	"crypto/x509"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/egress"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
)

// The CA is provisioned again (with the latest config) when its signing certificate
// nears expiry, and not before.
func TestEgressCARenewal(t *testing.T) {
	cert, key, _ := testenv.CA(t, "intermediate") // valid for a day
	e := &egressState{}
	e.issuer.Store(egress.NewCAIssuer([]*x509.Certificate{cert}, key))
	renewed := 0
	renew := func() error { renewed++; return nil }
	e.renewCA.Store(&renew)
	if err := e.renewIfDue(cert.NotAfter.Add(-egressCARenew - time.Hour)); err != nil || renewed != 0 {
		t.Fatalf("renewed early: %d, %v", renewed, err)
	}
	if err := e.renewIfDue(time.Now()); err != nil || renewed != 1 {
		t.Fatalf("not renewed a day before expiry: %d, %v", renewed, err)
	}
}

// A job's refusals are kept once each, bounded, and handed out once.
func TestEgressRefusalsPerJob(t *testing.T) {
	e := &egressState{blocked: map[string][]string{}, counts: map[string]int64{}, logger: zap.NewNop()}
	for i := 0; i < 20; i++ {
		e.refused("j0123456789ab", &egress.Refusal{Host: "a.example", Reason: egress.ReasonNotAllowed})
		e.refused("j0123456789ab", &egress.Refusal{Host: "h" + string(rune('a'+i)) + ".example", Reason: egress.ReasonNotAllowed})
	}
	e.refused("not a job id", &egress.Refusal{Host: "b.example", Reason: egress.ReasonDenied})
	list := e.takeBlocked("j0123456789ab")
	if len(list) != maxBlockedPerJob || list[0] != "a.example (not allowed by the operator)" {
		t.Fatalf("%q", list)
	}
	if again := e.takeBlocked("j0123456789ab"); len(again) != 0 {
		t.Fatalf("handed out twice: %q", again)
	}
	if c := e.refusedCounts(); c[0] != (hostCount{"a.example", 20}) || len(c) != 22 {
		t.Fatalf("%+v", c)
	}
}
