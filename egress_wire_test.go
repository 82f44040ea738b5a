package mcpsandbox

import (
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

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
	e := &egressState{blocked: map[string][]string{}, counts: map[string]*refusals{}, logger: zap.NewNop()}
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

// A refusal in a person's sandbox names the person: in the log line (with the
// container), in the metric's person label and in what the console lists.
func TestEgressRefusalNamesPerson(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	e := &egressState{blocked: map[string][]string{}, counts: map[string]*refusals{}, logger: zap.New(core)}
	alice := "alice"
	e.person.Store(&alice)
	host := "person-test-" + testenv.RandomHex(4) + ".example"
	e.refused("j0123456789ab", &egress.Refusal{Host: host, Port: 443, Reason: egress.ReasonNotAllowed})
	reg := prometheus.NewRegistry()
	reg.MustRegister(metricEgressRefused)
	if want := `caddy_mcp_sandbox_egress_refused_total{host="` + host + `",person="alice"} 1`; !strings.Contains(scrape(t, reg), want) {
		t.Fatalf("the metric lacks %s:\n%s", want, scrape(t, reg))
	}
	entries := logs.FilterMessage("egress refused").All()
	if len(entries) != 1 || entries[0].ContextMap()["person"] != "alice" || entries[0].ContextMap()["host"] != host {
		t.Fatalf("log %+v", entries)
	}
	if _, ok := entries[0].ContextMap()["container"]; !ok {
		t.Fatalf("the log line names no container: %+v", entries[0].ContextMap())
	}
	list := e.refusals()
	if len(list) != 1 || list[0].Person != "alice" || list[0].Count != 1 || time.Since(list[0].LastAt) > time.Minute || list[0].Reason != egress.ReasonNotAllowed {
		t.Fatalf("refusals %+v", list)
	}
}

// Reaching the connection cap is logged, with the person, at most once a minute.
func TestEgressCapLogged(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	e := &egressState{logger: zap.New(core)}
	bob := "bob"
	e.person.Store(&bob)
	e.turnedAway()
	e.turnedAway()
	entries := logs.All()
	if len(entries) != 1 || entries[0].ContextMap()["person"] != "bob" || entries[0].ContextMap()["cap"] != int64(egress.DefaultMaxConns) {
		t.Fatalf("log %+v", entries)
	}
}
