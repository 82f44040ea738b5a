package testenv

import "sort"

// Undeclared lists, as paths below path, the fields of v (decoded JSON) that schema (a
// decoded JSON schema) does not declare in its properties, at every depth: objects
// through "properties", arrays through "items".
func Undeclared(schema map[string]any, v any, path string) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		props, _ := schema["properties"].(map[string]any)
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			sub, ok := props[k].(map[string]any)
			if !ok {
				out = append(out, path+"."+k)
				continue
			}
			out = append(out, Undeclared(sub, v[k], path+"."+k)...)
		}
	case []any:
		items, _ := schema["items"].(map[string]any)
		for _, e := range v {
			out = append(out, Undeclared(items, e, path+"[]")...)
		}
	}
	return out
}
