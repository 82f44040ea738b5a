package testenv

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// ZerosServer is an HTTP server on loopback that answers each request with as many
// zero bytes as its query's n asks for, with a Content-Length: the upstream of
// download benchmarks. It closes when the test ends.
func ZerosServer(tb testing.TB) *httptest.Server {
	zeros := make([]byte, 256<<10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		for n > 0 {
			k := min(n, len(zeros))
			if _, err := w.Write(zeros[:k]); err != nil {
				return
			}
			n -= k
		}
	}))
	tb.Cleanup(srv.Close)
	return srv
}
