package egress

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
)

const benchBytes = 200 << 20

// fetch downloads n bytes through c and returns how long it took.
func fetch(tb testing.TB, c *http.Client, u string, n int) time.Duration {
	begin := time.Now()
	res, err := c.Get(u + "?n=" + strconv.Itoa(n))
	if err != nil {
		tb.Fatal(err)
	}
	got, err := io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if err != nil || got != int64(n) {
		tb.Fatalf("got %d bytes of %d: %v", got, n, err)
	}
	return time.Since(begin)
}

// BenchmarkEgress compares 200 MB and small requests through the proxy (absolute
// URLs, the policy checked per request) with the same through a bare TCP relay, in the
// same run. It reports each side's throughput, their ratio, and the time the proxy
// adds per small request.
func BenchmarkEgress(b *testing.B) {
	up := testenv.ZerosServer(b)
	pu, _ := url.Parse(up.URL)
	f := newProxyFixture(b, Rules{Allow: []string{"big.test:" + pu.Port()}, Hosts: map[string]string{"big.test": "127.0.0.1"}})
	viaProxy := f.client("")
	direct := &http.Client{Transport: &http.Transport{}}
	relay, _ := testenv.CountingProxy(b, pu.Host) // the baseline: a bare TCP relay, no HTTP
	relayURL := "http://" + relay + "/"
	proxyURL := "http://big.test:" + pu.Port() + "/"
	const small = 200
	var proxyBig, relayBig, proxySmall, relaySmall time.Duration
	for i := 0; i < b.N; i++ {
		relayBig += fetch(b, direct, relayURL, benchBytes)
		proxyBig += fetch(b, viaProxy, proxyURL, benchBytes)
		for j := 0; j < small; j++ {
			relaySmall += fetch(b, direct, relayURL, 100)
			proxySmall += fetch(b, viaProxy, proxyURL, 100)
		}
	}
	mbps := func(d time.Duration) float64 { return float64(benchBytes) * float64(b.N) / d.Seconds() / 1e6 }
	b.ReportMetric(mbps(relayBig), "relay-MB/s")
	b.ReportMetric(mbps(proxyBig), "proxy-MB/s")
	b.ReportMetric(relayBig.Seconds()/proxyBig.Seconds(), "throughput-ratio")
	added := (proxySmall - relaySmall) / time.Duration(small*b.N)
	b.ReportMetric(float64(added.Microseconds())/1000, "added-ms/req")
	if testing.Verbose() {
		fmt.Printf("relay %.0f MB/s, proxy %.0f MB/s, ratio %.2f, added %v per request\n",
			mbps(relayBig), mbps(proxyBig), relayBig.Seconds()/proxyBig.Seconds(), added)
	}
}
