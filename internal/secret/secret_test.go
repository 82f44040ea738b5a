package secret

import (
	"encoding/hex"
	"testing"
)

// TestDeriveKeyIsPinned pins the derivation: links, tokens and sessions already handed
// out must keep verifying after an upgrade, so no label's key may change. The values
// were computed with openssl (printf 'mcp-sandbox\0<label>' | openssl dgst -sha256
// -hmac <key>), independently of this code.
func TestDeriveKeyIsPinned(t *testing.T) {
	for _, c := range []struct{ key, label, want string }{
		{"test-api-key", "download links v1", "864c6a14f7c09c56d25d0f40a80e69dce1aefcadad8089f9150e68adcbbf9cc0"},
		{"k3y", "oauth sign-in form v1", "56dc01db841bd614e2cb585ba8cf7079e27c17dc957e8a01f5409d217fd469a6"},
		{"k3y", "upload links v1", "748ca503e13a0cd9ff3d3e118e8553a6aebeb1845229fa8529ab4c2ac9b831e0"},
		{"k3y", "oauth access tokens v1", "3c4e9cc1d307933abac8a617c4c1fb99147817594f2ddbe3a4a39b9b57828d0e"},
		{"k3y", "console sessions v1", "7dbaa2ef1a93e260cc62c55704f302c53bb67b9fe4feb4be92ce50697a6f3796"},
	} {
		if got := hex.EncodeToString(DeriveKey(c.key, c.label)); got != c.want {
			t.Errorf("DeriveKey(%q, %q) = %s, want %s", c.key, c.label, got, c.want)
		}
	}
	if a, b := DeriveKey("k3y", "a"), DeriveKey("k3y", "b"); hex.EncodeToString(a) == hex.EncodeToString(b) {
		t.Error("two labels derive the same key")
	}
}
