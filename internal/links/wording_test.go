package links

import (
	"strings"
	"testing"
)

// TestUploadPageWordsNeutral: the upload page and its script speak of the
// conversation, not of an "assistant" the person may not be talking to.
func TestUploadPageWordsNeutral(t *testing.T) {
	for _, name := range []string{"upload.html", "upload.js"} {
		b, err := uploadPageFS.ReadFile("uploadpage/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if s := string(b); strings.Contains(strings.ToLower(s), "assistant") || !strings.Contains(s, "go back to the conversation") && !strings.Contains(s, "Go back to the conversation") {
			t.Errorf("%s speaks of an assistant, or not of the conversation", name)
		}
	}
}
