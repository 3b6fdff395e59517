package schemacompat

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// countProbes runs f with compareHook counting the set probes it makes.
func countProbes(t *testing.T, f func()) int {
	t.Helper()
	n := 0
	compareHook = func() { n++ }
	defer func() { compareHook = nil }()
	f()
	return n
}

func jsonDef(def string) *clientv1.SchemaInfo {
	return &clientv1.SchemaInfo{Type: clientv1.SchemaType_SCHEMA_TYPE_JSON, Definition: []byte(def)}
}

func avroDef(def string) *clientv1.SchemaInfo {
	return &clientv1.SchemaInfo{Type: clientv1.SchemaType_SCHEMA_TYPE_AVRO, Definition: []byte(def)}
}

// list renders n items made by f, comma-separated.
func list(n int, f func(i int) string) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = f(i)
	}
	return strings.Join(parts, ",")
}

// TestJSONEnumCompatIsLinear: two enums of 200 000 values each are
// compared with O(n + m) set probes. The old code compared every pair with
// reflect.DeepEqual: 2·10^10 comparisons, minutes of CPU for one check.
func TestJSONEnumCompatIsLinear(t *testing.T) {
	const n = 200_000
	vals := list(n, func(i int) string {
		switch i % 4 {
		case 0:
			return fmt.Sprint(i)
		case 1:
			return fmt.Sprintf("%q", fmt.Sprint("v", i))
		case 2:
			return fmt.Sprintf(`{"k":%d,"a":[%d,true,null]}`, i, i)
		}
		return fmt.Sprintf("[%d]", i)
	})
	old := jsonDef(`{"enum":[` + vals + `]}`)
	grown := jsonDef(`{"enum":[` + vals + `,"extra"]}`)
	shrunk := jsonDef(`{"enum":[` + vals[:strings.LastIndex(vals, ",")] + `]}`)

	var err error
	probes := countProbes(t, func() { err = CanRead(grown, old) })
	if err != nil {
		t.Fatalf("an enum that grows must read the old values: %v", err)
	}
	if probes < n || probes > 4*n {
		t.Fatalf("%d probes comparing two enums of %d values, want between n and 4n", probes, n)
	}
	if err := CanRead(shrunk, old); err == nil || !strings.Contains(err.Error(), "enum value") {
		t.Fatalf("a removed enum value must be refused: %v", err)
	}
}

// TestJSONEnumKeyMatchesDeepEqual: the set key treats values as
// reflect.DeepEqual did (same JSON value, whatever the key order or
// spelling of numbers), and tells different ones apart.
func TestJSONEnumKeyMatchesDeepEqual(t *testing.T) {
	for _, c := range []struct {
		reader, writer string
		ok             bool
	}{
		{`[1, "1", true, null]`, `[null, true, "1", 1]`, true},
		{`[1.0]`, `[1]`, true},
		{`[0]`, `[-0]`, true},
		{`[{"a":1,"b":[2]}]`, `[{"b":[2],"a":1}]`, true},
		{`["1"]`, `[1]`, false},
		{`[true]`, `["true"]`, false},
		{`[null]`, `["null"]`, false},
		{`[[1]]`, `["[1]"]`, false},
		{`[{"a":1}]`, `[{"a":"1"}]`, false},
	} {
		err := CanRead(jsonDef(`{"enum":`+c.reader+`}`), jsonDef(`{"enum":`+c.writer+`}`))
		if (err == nil) != c.ok {
			t.Errorf("reader %s, writer %s: err = %v, want ok=%v", c.reader, c.writer, err, c.ok)
		}
	}
}

// TestJSONRequiredAndTypesAreLinear: long "required" and "type" lists
// are compared with set probes too (both were nested scans).
func TestJSONRequiredAndTypesAreLinear(t *testing.T) {
	const n = 100_000
	req := list(n, func(i int) string { return fmt.Sprintf(`"f%d"`, i) })
	types := list(n, func(i int) string { return `"string","integer"` })
	def := jsonDef(`{"type":[` + types + `],"required":[` + req + `]}`)
	var err error
	probes := countProbes(t, func() { err = CanRead(def, def) })
	if err != nil {
		t.Fatal(err)
	}
	if probes > 8*n {
		t.Fatalf("%d probes for lists of %d, want O(n)", probes, n)
	}
	if err := CanRead(jsonDef(`{"required":["a","b"]}`), jsonDef(`{"required":["a"]}`)); err == nil {
		t.Fatal("a newly required field must be refused")
	}
	if err := CanRead(jsonDef(`{"type":["number"]}`), jsonDef(`{"type":["integer","integer"]}`)); err != nil {
		t.Fatalf("number reads integer: %v", err)
	}
}

// TestAvroEnumAndFieldsCompatAreLinear: Avro enums of 200 000 symbols and
// records of 20 000 fields are compared with O(n) probes. hamba's checker,
// which the old code called, scans the reader's symbols for every writer
// symbol and the writer's fields for every reader field (O(n·m)).
func TestAvroEnumAndFieldsCompatAreLinear(t *testing.T) {
	const n = 200_000
	syms := list(n, func(i int) string { return fmt.Sprintf(`"S%d"`, i) })
	oldEnum := avroDef(`{"type":"enum","name":"E","symbols":[` + syms + `]}`)
	newEnum := avroDef(`{"type":"enum","name":"E","symbols":[` + syms + `,"EXTRA"]}`)
	var err error
	probes := countProbes(t, func() { err = CanRead(newEnum, oldEnum) })
	if err != nil {
		t.Fatalf("a grown enum reads the old symbols: %v", err)
	}
	if probes < n || probes > 4*n {
		t.Fatalf("%d probes for enums of %d symbols, want between n and 4n", probes, n)
	}
	if err := CanRead(oldEnum, newEnum); err == nil || !strings.Contains(err.Error(), "missing symbol EXTRA") {
		t.Fatalf("a reader without the writer's symbol must be refused: %v", err)
	}

	const nf = 20_000
	fields := list(nf, func(i int) string { return fmt.Sprintf(`{"name":"f%d","type":"int","aliases":["g%d"]}`, i, i) })
	rec := avroDef(`{"type":"record","name":"R","fields":[` + fields + `]}`)
	probes = countProbes(t, func() { err = CanRead(rec, rec) })
	if err != nil {
		t.Fatal(err)
	}
	if probes < nf || probes > 4*nf {
		t.Fatalf("%d probes for records of %d fields, want between n and 4n", probes, nf)
	}
}

// TestAvroResolutionRules: our walk keeps the rules hamba's checker
// applied.
func TestAvroResolutionRules(t *testing.T) {
	rec := func(fields string) string { return `{"type":"record","name":"R","fields":[` + fields + `]}` }
	for _, c := range []struct {
		name, reader, writer string
		ok                   bool
	}{
		{"promote int to long", rec(`{"name":"a","type":"long"}`), rec(`{"name":"a","type":"int"}`), true},
		{"no demotion", rec(`{"name":"a","type":"int"}`), rec(`{"name":"a","type":"long"}`), false},
		{"string to bytes", `"bytes"`, `"string"`, true},
		{"reader union has the branch", `["null","string"]`, `"string"`, true},
		{"reader union lacks the branch", `["null","int"]`, `"string"`, false},
		{"writer union all readable", `"double"`, `["int","float"]`, true},
		{"writer union one unreadable", `"long"`, `["int","string"]`, false},
		{"missing field with default", rec(`{"name":"a","type":"int"},{"name":"b","type":"int","default":1}`), rec(`{"name":"a","type":"int"}`), true},
		{"missing field without default", rec(`{"name":"a","type":"int"},{"name":"b","type":"int"}`), rec(`{"name":"a","type":"int"}`), false},
		{"field renamed via alias", rec(`{"name":"b","type":"int","aliases":["a"]}`), rec(`{"name":"a","type":"int"}`), true},
		{"record renamed via alias", `{"type":"record","name":"S","aliases":["R"],"fields":[]}`, rec(``), true},
		{"record renamed", `{"type":"record","name":"S","fields":[]}`, rec(``), false},
		{"fixed size", `{"type":"fixed","name":"F","size":4}`, `{"type":"fixed","name":"F","size":8}`, false},
		{"enum default covers", `{"type":"enum","name":"E","symbols":["A"],"default":"A"}`, `{"type":"enum","name":"E","symbols":["A","B"]}`, true},
		{"array items", `{"type":"array","items":"long"}`, `{"type":"array","items":"int"}`, true},
		{"map values", `{"type":"map","values":"int"}`, `{"type":"map","values":"string"}`, false},
		{"recursive record", `{"type":"record","name":"L","fields":[{"name":"next","type":["null","L"]}]}`, `{"type":"record","name":"L","fields":[{"name":"next","type":["null","L"]}]}`, true},
		// A failed branch is remembered as failed, not as compatible.
		{"union branch retried", `{"type":"record","name":"W","fields":[{"name":"x","type":["int","long"]},{"name":"y","type":"int"}]}`, `{"type":"record","name":"W","fields":[{"name":"x","type":"long"},{"name":"y","type":"long"}]}`, false},
	} {
		err := CanRead(avroDef(c.reader), avroDef(c.writer))
		if (err == nil) != c.ok {
			t.Errorf("%s: err = %v, want ok=%v", c.name, err, c.ok)
		}
	}
}

// TestDefinitionDepthBounded: a definition nesting deeper than
// maxDefinitionDepth is refused before any recursive parser sees it.
func TestDefinitionDepthBounded(t *testing.T) {
	deep := strings.Repeat(`{"type":"array","items":`, 300) + `"int"` + strings.Repeat(`}`, 300)
	for _, s := range []*clientv1.SchemaInfo{avroDef(deep), jsonDef(deep)} {
		if err := Validate(s); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "nests deeper than 256") {
			t.Fatalf("%s: %v", TypeName(s.GetType()), err)
		}
	}
	// Brackets inside strings do not count.
	ok := `{"type":"record","name":"R","doc":"` + strings.Repeat("[{", 1000) + `","fields":[]}`
	if err := Validate(avroDef(ok)); err != nil {
		t.Fatal(err)
	}
}

// TestAvroParserPanicIsInvalid: the hamba/avro parser panics on an empty
// union with a default (found by FuzzAvroSchema); Validate must return
// ErrInvalid instead of crashing the broker that registers the schema.
func TestAvroParserPanicIsInvalid(t *testing.T) {
	def := avroDef(`{"type":"record","name":"A","fields":[{"name":"a","type":[],"default":null}]}`)
	if err := Validate(def); !errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
	if err := CanRead(def, def); !errors.Is(err, ErrInvalid) {
		t.Fatalf("CanRead: err = %v, want ErrInvalid", err)
	}
}
