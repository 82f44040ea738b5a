package fleet

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/docker/docker/client"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/sandbox"
)

// Engine is one Docker engine the sandboxes are placed on (an `engine` line).
type Engine struct {
	// Name names the engine in the placement record and the container's label.
	Name string `json:"name"`
	// Host is the engine's address: unix:///var/run/docker.sock or tcp://host:2376.
	Host string `json:"host"`
	// TLSCA, TLSCert and TLSKey are files as Docker's --tlscacert, --tlscert and
	// --tlskey: the CA that signed the engine's certificate and the client's own
	// certificate and key. Empty: no TLS.
	TLSCA   string `json:"tls_ca,omitempty"`
	TLSCert string `json:"tls_cert,omitempty"`
	TLSKey  string `json:"tls_key,omitempty"`
}

// validName is what a person or an engine may be called: short, and safe in Docker
// names and labels and in storage keys.
var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,31}$`)

// ValidName reports whether name may name a person or an engine: 1 to 32 lower-case
// letters, digits, '_', '.' or '-', starting with a letter or digit.
func ValidName(name string) bool { return validName.MatchString(name) }

func (e Engine) tls() bool { return e.TLSCA != "" || e.TLSCert != "" || e.TLSKey != "" }

// ValidateEngines reports every engine line that cannot work. It does no I/O.
func ValidateEngines(engines []Engine) error {
	var errs []error
	seen := map[string]bool{}
	for _, e := range engines {
		if !ValidName(e.Name) {
			errs = append(errs, fmt.Errorf("engine %q: a name is 1 to 32 of a-z, 0-9, '_', '.', '-', starting with a letter or digit", e.Name))
		}
		if seen[e.Name] {
			errs = append(errs, fmt.Errorf("engine %q is named twice", e.Name))
		}
		seen[e.Name] = true
		u, err := client.ParseHostURL(e.Host)
		if err != nil {
			errs = append(errs, fmt.Errorf("engine %s: address %q: %w", e.Name, e.Host, err))
			continue
		}
		if u.Scheme != "unix" && u.Scheme != "tcp" && u.Scheme != "npipe" {
			errs = append(errs, fmt.Errorf("engine %s: address %q: want unix://, tcp:// or npipe:// (the Docker Go client does not speak ssh://)", e.Name, e.Host))
			continue
		}
		if e.tls() {
			switch {
			case u.Scheme != "tcp":
				errs = append(errs, fmt.Errorf("engine %s: TLS needs a tcp:// address, not %s", e.Name, e.Host))
			case e.TLSCA == "":
				errs = append(errs, fmt.Errorf("engine %s: tls_ca is missing: without it the engine's certificate is not checked", e.Name))
			case (e.TLSCert == "") != (e.TLSKey == ""):
				errs = append(errs, fmt.Errorf("engine %s: tls_cert and tls_key go together", e.Name))
			}
		}
	}
	return errors.Join(errs...)
}

// NewClient makes a client for a named engine. Unlike the default engine's, it takes
// nothing from the environment (DOCKER_CERT_PATH would apply to every engine). It
// reads the TLS files and does no other I/O.
func (e Engine) NewClient() (sandbox.API, error) {
	opts := []client.Opt{client.WithHost(e.Host), client.WithAPIVersionNegotiation()}
	if e.tls() {
		opts = append(opts, client.WithTLSClientConfig(e.TLSCA, e.TLSCert, e.TLSKey))
	}
	cli, err := client.NewClientWithOpts(opts...)
	if err != nil {
		return nil, fmt.Errorf("creating Docker client for engine %s (%s): %w", e.Name, e.Host, err)
	}
	return cli, nil
}
