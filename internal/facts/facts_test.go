package facts

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
)

// TestDecodeStoredDropsInjection: facts an earlier version stored with whatever
// the container printed come back with the known names only, marked stale so they are
// stored again clean.
func TestDecodeStoredDropsInjection(t *testing.T) {
	poisoned := `{"image_id":"sha256:1","programs":["python3","` + testenv.PlantedNotice + `","jq"],"python_modules":["` + testenv.PlantedNotice + `","numpy"]}`
	f, stale, ok := decodeStored([]byte(poisoned))
	if !ok || !stale || !slices.Equal(f.Programs, []string{"python3", "jq"}) || !slices.Equal(f.PythonModules, []string{"numpy"}) || f.ImageID != "sha256:1" {
		t.Errorf("poisoned facts decode as %+v (stale %v, ok %v)", f, stale, ok)
	}
	b, _ := json.Marshal(f)
	if testenv.HasInjection(string(b)) {
		t.Errorf("the facts stored again still carry the injection: %s", b)
	}

	if f, stale, ok := decodeStored([]byte(`{"image_id":"sha256:1","programs":["python3","jq"],"python_modules":["numpy"]}`)); !ok || stale || len(f.Programs) != 2 {
		t.Errorf("clean facts decode as %+v (stale %v, ok %v)", f, stale, ok)
	}
	for _, bad := range []string{`{"programs":["git"]}`, `not json`, `{"image_id":"x","programs":["` + strings.Repeat("a", maxStored) + `"]}`} {
		if _, _, ok := decodeStored([]byte(bad)); ok {
			t.Errorf("decodeStored(%.40q...) accepted it", bad)
		}
	}
}
