package oauth_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"

	"github.com/caddyserver/certmagic"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/oauth"
)

// A host serves the Server's own paths and checks bearer tokens in front of /mcp. A
// request without a token gets the challenge that starts the client's discovery.
func Example() {
	dir, _ := os.MkdirTemp("", "oauth-example")
	defer os.RemoveAll(dir)
	srv, err := oauth.New(oauth.Options{
		APIKey:    "a long random key",
		Storage:   &certmagic.FileStorage{Path: dir},
		PublicURL: "https://sandbox.example.com",
	})
	if err != nil {
		panic(err)
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if srv.Handles(r) {
			srv.ServeHTTP(w, r)
			return
		}
		if _, ok := srv.Authenticate(w, r); !ok {
			return // the 401 is written
		}
		fmt.Fprintln(w, "hello from the sandbox")
	})

	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "https://sandbox.example.com/mcp", nil))
	fmt.Println(rec.Code)
	fmt.Println(rec.Header().Get("WWW-Authenticate"))
	// Output:
	// 401
	// Bearer resource_metadata="https://sandbox.example.com/.well-known/oauth-protected-resource/mcp"
}
