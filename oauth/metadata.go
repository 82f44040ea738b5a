package oauth

import (
	"net/http"
)

// ProtectedResourceMetadata is the RFC 9728 document about the MCP endpoint.
type ProtectedResourceMetadata struct {
	Resource               string   `json:"resource"`
	AuthorizationServers   []string `json:"authorization_servers"`
	ScopesSupported        []string `json:"scopes_supported"`
	BearerMethodsSupported []string `json:"bearer_methods_supported"`
	ResourceName           string   `json:"resource_name,omitempty"`
}

// AuthorizationServerMetadata is the RFC 8414 document about this server.
type AuthorizationServerMetadata struct {
	Issuer                                     string   `json:"issuer"`
	AuthorizationEndpoint                      string   `json:"authorization_endpoint"`
	TokenEndpoint                              string   `json:"token_endpoint"`
	RegistrationEndpoint                       string   `json:"registration_endpoint"`
	RevocationEndpoint                         string   `json:"revocation_endpoint"`
	ScopesSupported                            []string `json:"scopes_supported"`
	ResponseTypesSupported                     []string `json:"response_types_supported"`
	ResponseModesSupported                     []string `json:"response_modes_supported"`
	GrantTypesSupported                        []string `json:"grant_types_supported"`
	TokenEndpointAuthMethodsSupported          []string `json:"token_endpoint_auth_methods_supported"`
	RevocationEndpointAuthMethodsSupported     []string `json:"revocation_endpoint_auth_methods_supported"`
	CodeChallengeMethodsSupported              []string `json:"code_challenge_methods_supported"`
	ClientIDMetadataDocumentSupported          bool     `json:"client_id_metadata_document_supported"`
	AuthorizationResponseIssParameterSupported bool     `json:"authorization_response_iss_parameter_supported"`
}

// Client authentication methods at the token and revocation endpoints. "none" must be
// listed for Claude to use client ID metadata documents.
var authMethods = []string{"none", "client_secret_post", "client_secret_basic"}

// ProtectedResourceMetadata returns the RFC 9728 document as served for r.
func (s *Server) ProtectedResourceMetadata(r *http.Request) ProtectedResourceMetadata {
	return ProtectedResourceMetadata{
		Resource:               s.resourceURL(r),
		AuthorizationServers:   []string{s.Origin(r)},
		ScopesSupported:        []string{Scope},
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "MCP Sandbox",
	}
}

// AuthorizationServerMetadata returns the RFC 8414 document as served for r. The issuer
// is the origin with no trailing slash, and every endpoint sits at the root.
func (s *Server) AuthorizationServerMetadata(r *http.Request) AuthorizationServerMetadata {
	o := s.Origin(r)
	return AuthorizationServerMetadata{
		Issuer:                                     o,
		AuthorizationEndpoint:                      o + pathAuthorize,
		TokenEndpoint:                              o + pathToken,
		RegistrationEndpoint:                       o + pathRegister,
		RevocationEndpoint:                         o + pathRevoke,
		ScopesSupported:                            []string{Scope},
		ResponseTypesSupported:                     []string{"code"},
		ResponseModesSupported:                     []string{"query"},
		GrantTypesSupported:                        []string{"authorization_code", "refresh_token"},
		TokenEndpointAuthMethodsSupported:          authMethods,
		RevocationEndpointAuthMethodsSupported:     authMethods,
		CodeChallengeMethodsSupported:              []string{"S256"},
		ClientIDMetadataDocumentSupported:          true,
		AuthorizationResponseIssParameterSupported: true,
	}
}

func (s *Server) serveProtectedResourceMetadata(w http.ResponseWriter, r *http.Request) {
	// Short caching: the document depends on the Host when no public URL is set.
	w.Header().Set("Cache-Control", "public, max-age=300")
	w.Header().Set("Vary", "Host")
	writeJSON(w, http.StatusOK, s.ProtectedResourceMetadata(r))
}

func (s *Server) serveAuthorizationServerMetadata(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "public, max-age=300")
	w.Header().Set("Vary", "Host")
	writeJSON(w, http.StatusOK, s.AuthorizationServerMetadata(r))
}
