package facts

import (
	"context"
	"encoding/json"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/testenv"
	"go.uber.org/zap"
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

// fakeSource is a sandbox whose detection is counted.
type fakeSource struct {
	image    string
	found    boxapi.Facts
	detected atomic.Int32
}

func (s *fakeSource) Ensure(context.Context) error            { return nil }
func (s *fakeSource) ImageID(context.Context) (string, error) { return s.image, nil }
func (s *fakeSource) Detect(context.Context) (boxapi.Facts, error) {
	s.detected.Add(1)
	return s.found, nil
}

// memStore is storage in memory.
type memStore struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (m *memStore) Load(_ context.Context, key string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if b, ok := m.m[key]; ok {
		return b, nil
	}
	return nil, fs.ErrNotExist
}

func (m *memStore) Store(_ context.Context, key string, b []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.m[key] = b
	return nil
}

// TestFreshFactsSpareADetection: facts found in an unused container of the same image
// (Deps.Fresh) are taken without a detection in this sandbox, filtered to the known
// names and stored; those of another image are not, and the sandbox detects.
func TestFreshFactsSpareADetection(t *testing.T) {
	fresh := &boxapi.Facts{ImageID: "sha256:a", Programs: []string{"git", testenv.PlantedNotice}, PythonModules: []string{"numpy"}}
	for _, tc := range []struct {
		image    string
		detected int32
		programs []string
	}{
		{"sha256:a", 0, []string{"git"}},
		{"sha256:b", 1, []string{"node"}},
	} {
		src := &fakeSource{image: tc.image, found: boxapi.Facts{ImageID: tc.image, Programs: []string{"node"}}}
		st := &memStore{m: map[string][]byte{}}
		d := Deps{Source: src, Store: st, Key: Key("c"), Logger: zap.NewNop(), Fresh: func(id string) *boxapi.Facts {
			if id == fresh.ImageID {
				return fresh
			}
			return nil
		}}
		var c Cache
		c.Warm(d)
		f := c.Get(context.Background(), d, 5*time.Second)
		if f == nil || !slices.Equal(f.Programs, tc.programs) || f.ImageID != tc.image {
			t.Fatalf("image %s: facts %+v, want programs %v", tc.image, f, tc.programs)
		}
		if n := src.detected.Load(); n != tc.detected {
			t.Errorf("image %s: %d detections in the sandbox, want %d", tc.image, n, tc.detected)
		}
		if b, _ := st.Load(context.Background(), Key("c")); !strings.Contains(string(b), tc.image) || testenv.HasInjection(string(b)) {
			t.Errorf("image %s: stored %s", tc.image, b)
		}
	}
}
