package schemacompat

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// jsonTypes are the JSON Schema type names.
var jsonTypes = []string{"array", "boolean", "integer", "null", "number", "object", "string"}

// maxJSONDepth bounds the nesting of a JSON Schema the checker walks.
const maxJSONDepth = 64

// maxDefinitionDepth bounds the bracket nesting of a JSON or Avro
// definition, checked on the raw bytes before any recursive parser runs. An
// Avro record nested in a record costs three levels ({ record, [ fields,
// { field), so 256 allows about 80 levels of records.
const maxDefinitionDepth = 256

// checkJSONDepth fails when def nests objects and arrays deeper than limit.
// It scans the bytes once, skipping strings, without allocating; def need
// not be valid JSON (the parser that follows says what else is wrong).
func checkJSONDepth(def []byte, limit int) error {
	depth, inString, escaped := 0, false, false
	for i, c := range def {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			if depth++; depth > limit {
				return fmt.Errorf("%w: schema.definition nests deeper than %d at byte %d", ErrInvalid, limit, i)
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return nil
}

// parseJSON parses and validates a JSON Schema's structure: the document is
// an object; "type" a type name or a list of them; "properties" an object
// of schemas; "required" a list of strings; "items" a schema;
// "additionalProperties" a boolean or a schema.
func parseJSON(def []byte) (map[string]any, error) {
	if err := checkJSONDepth(def, maxDefinitionDepth); err != nil {
		return nil, err
	}
	var doc any
	if err := json.Unmarshal(def, &doc); err != nil {
		return nil, fmt.Errorf("%w: schema.definition is not JSON: %v", ErrInvalid, err)
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: schema.definition must be a JSON Schema object, not %T", ErrInvalid, doc)
	}
	if err := checkJSONNode("$", m, 0); err != nil {
		return nil, err
	}
	return m, nil
}

func checkJSONNode(path string, n map[string]any, depth int) error {
	if depth > maxJSONDepth {
		return fmt.Errorf("%w: schema.definition nests deeper than %d at %s", ErrInvalid, maxJSONDepth, path)
	}
	if t, ok := n["type"]; ok {
		switch v := t.(type) {
		case string:
			if !slices.Contains(jsonTypes, v) {
				return fmt.Errorf("%w: schema.definition %s.type %q is not one of %s", ErrInvalid, path, v, strings.Join(jsonTypes, ", "))
			}
		case []any:
			for _, e := range v {
				s, ok := e.(string)
				if !ok || !slices.Contains(jsonTypes, s) {
					return fmt.Errorf("%w: schema.definition %s.type lists %v, not one of %s", ErrInvalid, path, e, strings.Join(jsonTypes, ", "))
				}
			}
		default:
			return fmt.Errorf("%w: schema.definition %s.type must be a string or a list of strings", ErrInvalid, path)
		}
	}
	if p, ok := n["properties"]; ok {
		pm, ok := p.(map[string]any)
		if !ok {
			return fmt.Errorf("%w: schema.definition %s.properties must be an object", ErrInvalid, path)
		}
		for k, v := range pm {
			c, ok := v.(map[string]any)
			if !ok {
				if _, isBool := v.(bool); isBool {
					continue
				}
				return fmt.Errorf("%w: schema.definition %s.properties.%s must be a schema object", ErrInvalid, path, k)
			}
			if err := checkJSONNode(path+"."+k, c, depth+1); err != nil {
				return err
			}
		}
	}
	if r, ok := n["required"]; ok {
		rl, ok := r.([]any)
		if !ok {
			return fmt.Errorf("%w: schema.definition %s.required must be a list of strings", ErrInvalid, path)
		}
		for _, e := range rl {
			if _, ok := e.(string); !ok {
				return fmt.Errorf("%w: schema.definition %s.required must be a list of strings", ErrInvalid, path)
			}
		}
	}
	if it, ok := n["items"]; ok {
		c, ok := it.(map[string]any)
		if !ok {
			return fmt.Errorf("%w: schema.definition %s.items must be a schema object", ErrInvalid, path)
		}
		if err := checkJSONNode(path+"[]", c, depth+1); err != nil {
			return err
		}
	}
	if ap, ok := n["additionalProperties"]; ok {
		switch v := ap.(type) {
		case bool:
		case map[string]any:
			if err := checkJSONNode(path+".*", v, depth+1); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: schema.definition %s.additionalProperties must be a boolean or a schema", ErrInvalid, path)
		}
	}
	if e, ok := n["enum"]; ok {
		if _, ok := e.([]any); !ok {
			return fmt.Errorf("%w: schema.definition %s.enum must be a list", ErrInvalid, path)
		}
	}
	return nil
}

func jsonTypeSet(n map[string]any) []string {
	switch v := n["type"].(type) {
	case string:
		return []string{v}
	case []any:
		out := make([]string, 0, len(v))
		for _, e := range v {
			out = append(out, e.(string))
		}
		return out
	}
	return nil
}

func jsonRequired(n map[string]any) []string {
	var out []string
	if rl, ok := n["required"].([]any); ok {
		for _, e := range rl {
			out = append(out, e.(string))
		}
	}
	return out
}

func jsonProps(n map[string]any) map[string]any {
	pm, _ := n["properties"].(map[string]any)
	return pm
}

// closed reports whether a schema object forbids properties it does not list.
func closed(n map[string]any) bool {
	b, ok := n["additionalProperties"].(bool)
	return ok && !b
}

func fieldName(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func where(path string) string {
	if path == "" {
		return "the root"
	}
	return fmt.Sprintf("field %q", path)
}

// jsonCanRead reports whether every document valid under w is valid under
// r, field by field: types (a reader's "number" accepts "integer"), fields
// the reader requires (the writer must require them too), fields the
// writer may send (a reader with additionalProperties false must list
// them), array items and enums. Keywords it does not model ($ref, oneOf,
// patterns, bounds) must be equal in both schemas.
func jsonCanRead(path string, r, w map[string]any) error {
	for _, k := range []string{"$ref", "oneOf", "anyOf", "allOf", "not", "const", "pattern", "format"} {
		if !reflect.DeepEqual(r[k], w[k]) {
			return fmt.Errorf("%s: %q differs and only equal values are supported", where(path), k)
		}
	}
	rt, wt := jsonTypeSet(r), jsonTypeSet(w)
	if len(rt) > 0 {
		if len(wt) == 0 {
			return fmt.Errorf("%s: type changed from any to %s", where(path), strings.Join(rt, "|"))
		}
		// Sets, not nested scans: a "type" list may repeat a name any
		// number of times, and every check here is O(n) in what it reads.
		rts := stringSet(rt)
		for _, t := range wt {
			if !setHas(rts, t) && (t != "integer" || !setHas(rts, "number")) {
				return fmt.Errorf("%s: type changed from %s to %s", where(path), strings.Join(wt, "|"), strings.Join(rt, "|"))
			}
		}
	}
	if re, ok := r["enum"].([]any); ok {
		we, ok := w["enum"].([]any)
		if !ok {
			return fmt.Errorf("%s: enum added", where(path))
		}
		// Each value's canonical key (exactly what reflect.DeepEqual
		// compares for values decoded by encoding/json) goes in a set:
		// O(n + m), where comparing every pair was O(n·m).
		rs := make(map[string]struct{}, len(re))
		for _, v := range re {
			rs[jsonValueKey(v)] = struct{}{}
		}
		for _, v := range we {
			if !setHas(rs, jsonValueKey(v)) {
				return fmt.Errorf("%s: enum value %v removed", where(path), v)
			}
		}
	}
	rp, wp := jsonProps(r), jsonProps(w)
	wreq := stringSet(jsonRequired(w))
	for _, k := range jsonRequired(r) {
		if !setHas(wreq, k) {
			if _, had := wp[k]; had {
				return fmt.Errorf("field %q is required by the reader but optional in the writer", fieldName(path, k))
			}
			return fmt.Errorf("field %q is required by the reader but absent from the writer (add it as optional)", fieldName(path, k))
		}
	}
	keys := make([]string, 0, len(wp))
	for k := range wp {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		rv, ok := rp[k]
		if !ok {
			if closed(r) {
				return fmt.Errorf("field %q written by the writer is not allowed by the reader (additionalProperties false)", fieldName(path, k))
			}
			continue
		}
		rc, rok := rv.(map[string]any)
		wc, wok := wp[k].(map[string]any)
		if rok && wok {
			if err := jsonCanRead(fieldName(path, k), rc, wc); err != nil {
				return err
			}
		} else if !reflect.DeepEqual(rv, wp[k]) {
			return fmt.Errorf("field %q: schema changed", fieldName(path, k))
		}
	}
	if ri, ok := r["items"].(map[string]any); ok {
		if wi, ok := w["items"].(map[string]any); ok {
			if err := jsonCanRead(path+"[]", ri, wi); err != nil {
				return err
			}
		}
	}
	return nil
}

// stringSet is the set of ss.
func stringSet(ss []string) map[string]struct{} {
	m := make(map[string]struct{}, len(ss))
	for _, s := range ss {
		m[s] = struct{}{}
	}
	return m
}

// setHas reports whether k is in m; it is the one place a compatibility
// check probes a set, so tests can count the probes (compareHook).
func setHas(m map[string]struct{}, k string) bool {
	compared()
	_, ok := m[k]
	return ok
}

// jsonValueKey is a canonical key for a value decoded by encoding/json
// (nil, bool, float64, string, []any, map[string]any): two values have the
// same key exactly when reflect.DeepEqual says they are equal. Scalars get
// a type-tagged text; lists and objects their JSON encoding, whose object
// keys encoding/json sorts.
func jsonValueKey(v any) string {
	switch x := v.(type) {
	case nil:
		return "z"
	case bool:
		return "b" + strconv.FormatBool(x)
	case float64:
		if x == 0 {
			x = 0 // -0 == 0, as DeepEqual has it
		}
		return "n" + strconv.FormatFloat(x, 'g', -1, 64)
	case string:
		return "s" + x
	}
	out, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("?%#v", v)
	}
	return "j" + string(out)
}
