package schemacompat

import (
	"testing"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// fuzzSchema checks the properties every definition must have: Validate,
// Canonical and Same never panic; a valid schema reads itself and is the
// same as itself; checking it against a valid seed in every mode returns
// an answer rather than panicking.
func fuzzSchema(t *testing.T, s, seed *clientv1.SchemaInfo) {
	if err := Validate(s); err != nil {
		return
	}
	_ = Canonical(s)
	if !Same(s, s) {
		t.Fatalf("a valid schema is not the same as itself: %q", s.GetDefinition())
	}
	if err := CanRead(s, s); err != nil {
		t.Fatalf("a valid schema cannot read itself: %v\n%q", err, s.GetDefinition())
	}
	for _, mode := range []clientv1.SchemaCompatibility{backward, forward, full, clientv1.SchemaCompatibility_SCHEMA_COMPATIBILITY_FULL_TRANSITIVE} {
		_ = Check(mode, s, []*clientv1.SchemaInfo{seed})
		_ = Check(mode, seed, []*clientv1.SchemaInfo{s, s})
	}
}

func FuzzJSONSchema(f *testing.F) {
	seed := jsonSchema(field{"name", "string", true}, field{"age", "integer", false})
	f.Add(seed.GetDefinition())
	f.Add([]byte(`{"type":["object","null"],"properties":{"a":{"enum":[1,"x",null,{"k":[1]}]},"b":{"type":"array","items":{"type":"number"}}},"additionalProperties":false,"required":["a"]}`))
	f.Add([]byte(`{"properties":{"a":true,"b":{"additionalProperties":{"type":"string"}}},"oneOf":[{"type":"string"}]}`))
	f.Fuzz(func(t *testing.T, def []byte) {
		fuzzSchema(t, jsonDef(string(def)), seed)
	})
}

func FuzzAvroSchema(f *testing.F) {
	seed := avroSchema(field{"name", "string", true}, field{"age", "integer", false})
	f.Add(seed.GetDefinition())
	f.Add([]byte(`{"type":"record","name":"L","fields":[{"name":"next","type":["null","L"],"default":null},{"name":"e","type":{"type":"enum","name":"E","symbols":["A","B"],"default":"A"}},{"name":"m","type":{"type":"map","values":{"type":"array","items":"long"}}},{"name":"f","type":{"type":"fixed","name":"F","size":4},"aliases":["g"]}]}`))
	f.Add([]byte(`["null","int","string"]`))
	f.Fuzz(func(t *testing.T, def []byte) {
		fuzzSchema(t, avroDef(string(def)), seed)
	})
}

func FuzzProtoSchema(f *testing.F) {
	seed := protoSchema(field{"name", "string", true}, field{"age", "integer", false})
	f.Add(seed.GetDefinition(), seed.GetMessageName())
	f.Add(seed.GetDefinition(), "test.v1.Missing")
	f.Add([]byte{0x0a, 0x02, 0x0a, 0x00}, "x")
	f.Fuzz(func(t *testing.T, def []byte, name string) {
		s := &clientv1.SchemaInfo{Type: clientv1.SchemaType_SCHEMA_TYPE_PROTOBUF, Definition: def, MessageName: name}
		fuzzSchema(t, s, seed)
	})
}
