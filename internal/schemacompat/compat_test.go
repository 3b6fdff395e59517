package schemacompat

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
)

const (
	backward = clientv1.SchemaCompatibility_SCHEMA_COMPATIBILITY_BACKWARD
	forward  = clientv1.SchemaCompatibility_SCHEMA_COMPATIBILITY_FORWARD
	full     = clientv1.SchemaCompatibility_SCHEMA_COMPATIBILITY_FULL
	none     = clientv1.SchemaCompatibility_SCHEMA_COMPATIBILITY_NONE
)

// field is one field of a test schema.
type field struct {
	name     string
	typ      string // "string" or "integer"
	required bool
}

func jsonSchema(fields ...field) *clientv1.SchemaInfo {
	var props, req []string
	for _, f := range fields {
		props = append(props, fmt.Sprintf("%q:{\"type\":%q}", f.name, f.typ))
		if f.required {
			req = append(req, fmt.Sprintf("%q", f.name))
		}
	}
	def := fmt.Sprintf(`{"type":"object","properties":{%s},"required":[%s]}`, strings.Join(props, ","), strings.Join(req, ","))
	return &clientv1.SchemaInfo{Type: clientv1.SchemaType_SCHEMA_TYPE_JSON, Definition: []byte(def)}
}

func avroSchema(fields ...field) *clientv1.SchemaInfo {
	var fs []string
	for _, f := range fields {
		typ := `"string"`
		if f.typ == "integer" {
			typ = `"int"`
		}
		if f.required {
			fs = append(fs, fmt.Sprintf(`{"name":%q,"type":%s}`, f.name, typ))
		} else {
			fs = append(fs, fmt.Sprintf(`{"name":%q,"type":["null",%s],"default":null}`, f.name, typ))
		}
	}
	def := fmt.Sprintf(`{"type":"record","name":"Event","namespace":"test.v1","fields":[%s]}`, strings.Join(fs, ","))
	return &clientv1.SchemaInfo{Type: clientv1.SchemaType_SCHEMA_TYPE_AVRO, Definition: []byte(def)}
}

func protoSchema(fields ...field) *clientv1.SchemaInfo {
	m := &descriptorpb.DescriptorProto{Name: proto.String("Event")}
	for i, f := range fields {
		num := int32(i + 1)
		switch f.name { // keep field numbers stable across versions
		case "name":
			num = 1
		case "age":
			num = 2
		case "email":
			num = 3
		}
		typ := descriptorpb.FieldDescriptorProto_TYPE_STRING
		if f.typ == "integer" {
			typ = descriptorpb.FieldDescriptorProto_TYPE_INT64
		}
		label := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL
		if f.required {
			label = descriptorpb.FieldDescriptorProto_LABEL_REQUIRED
		}
		m.Field = append(m.Field, &descriptorpb.FieldDescriptorProto{Name: proto.String(f.name), Number: proto.Int32(num), Type: typ.Enum(), Label: label.Enum()})
	}
	fd := &descriptorpb.FileDescriptorProto{Name: proto.String("event.proto"), Package: proto.String("test.v1"), Syntax: proto.String("proto2"), MessageType: []*descriptorpb.DescriptorProto{m}}
	def, err := proto.Marshal(&descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{fd}})
	if err != nil {
		panic(err)
	}
	return &clientv1.SchemaInfo{Type: clientv1.SchemaType_SCHEMA_TYPE_PROTOBUF, Definition: def, MessageName: "test.v1.Event"}
}

// TestCompatibilityMatrix checks every mode against every kind of change,
// for JSON Schema and protobuf, and that a refusal names the field.
func TestCompatibilityMatrix(t *testing.T) {
	base := []field{{"name", "string", true}, {"age", "integer", false}}
	changes := []struct {
		name   string
		next   []field
		field  string // named in the error
		accept map[clientv1.SchemaCompatibility]bool
	}{
		{"add optional field", []field{{"name", "string", true}, {"age", "integer", false}, {"email", "string", false}}, "",
			map[clientv1.SchemaCompatibility]bool{backward: true, forward: true, full: true, none: true}},
		{"add required field", []field{{"name", "string", true}, {"age", "integer", false}, {"email", "string", true}}, "email",
			map[clientv1.SchemaCompatibility]bool{backward: false, forward: true, full: false, none: true}},
		{"remove optional field", []field{{"name", "string", true}}, "",
			map[clientv1.SchemaCompatibility]bool{backward: true, forward: true, full: true, none: true}},
		{"remove required field", []field{{"age", "integer", false}}, "name",
			map[clientv1.SchemaCompatibility]bool{backward: true, forward: false, full: false, none: true}},
		{"change field type", []field{{"name", "string", true}, {"age", "string", false}}, "age",
			map[clientv1.SchemaCompatibility]bool{backward: false, forward: false, full: false, none: true}},
	}
	kinds := []struct {
		name string
		mk   func(...field) *clientv1.SchemaInfo
	}{{"json", jsonSchema}, {"protobuf", protoSchema}, {"avro", avroSchema}}
	for _, k := range kinds {
		old := k.mk(base...)
		old.Version = 1
		if err := Validate(old); err != nil {
			t.Fatalf("%s base schema invalid: %v", k.name, err)
		}
		for _, c := range changes {
			next := k.mk(c.next...)
			if err := Validate(next); err != nil {
				t.Fatalf("%s %s: invalid: %v", k.name, c.name, err)
			}
			for _, mode := range []clientv1.SchemaCompatibility{backward, forward, full, none} {
				err := Check(mode, next, []*clientv1.SchemaInfo{old})
				want := c.accept[mode]
				if want && err != nil {
					t.Errorf("%s / %s / %s: refused: %v", k.name, ModeName(mode), c.name, err)
				}
				if !want {
					if err == nil {
						t.Errorf("%s / %s / %s: accepted, want refused", k.name, ModeName(mode), c.name)
						continue
					}
					if !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), c.field) || !strings.Contains(err.Error(), ModeName(mode)) {
						t.Errorf("%s / %s / %s: error %q should wrap ErrIncompatible and name the mode and field %q", k.name, ModeName(mode), c.name, err, c.field)
					}
				}
			}
		}
	}
}

// TestCompatibilityTransitive: a change compatible with the latest version
// but not with an older one passes BACKWARD and fails BACKWARD_TRANSITIVE.
func TestCompatibilityTransitive(t *testing.T) {
	for _, mk := range []func(...field) *clientv1.SchemaInfo{jsonSchema, protoSchema, avroSchema} {
		v1 := mk(field{"name", "string", true}, field{"age", "integer", false})
		v1.Version = 1
		v2 := mk(field{"name", "string", true})
		v2.Version = 2
		v3 := mk(field{"name", "string", true}, field{"age", "string", false})
		hist := []*clientv1.SchemaInfo{v1, v2}
		if err := Check(backward, v3, hist); err != nil {
			t.Fatalf("BACKWARD against the latest: %v", err)
		}
		err := Check(clientv1.SchemaCompatibility_SCHEMA_COMPATIBILITY_BACKWARD_TRANSITIVE, v3, hist)
		if err == nil || !strings.Contains(err.Error(), "version 1") || !strings.Contains(err.Error(), "age") {
			t.Fatalf("BACKWARD_TRANSITIVE: got %v, want a refusal naming version 1 and field age", err)
		}
	}
}

// TestCompatibilityTypeChange: a change of schema type is refused by every
// mode but NONE.
func TestCompatibilityTypeChange(t *testing.T) {
	old := jsonSchema(field{"name", "string", true})
	old.Version = 1
	str := &clientv1.SchemaInfo{Type: clientv1.SchemaType_SCHEMA_TYPE_STRING}
	for _, mode := range []clientv1.SchemaCompatibility{backward, forward, full} {
		err := Check(mode, str, []*clientv1.SchemaInfo{old})
		if err == nil || !strings.Contains(err.Error(), "JSON") || !strings.Contains(err.Error(), "STRING") {
			t.Errorf("%s: got %v, want a type-change refusal", ModeName(mode), err)
		}
	}
	if err := Check(none, str, []*clientv1.SchemaInfo{old}); err != nil {
		t.Errorf("NONE: %v", err)
	}
}

// TestValidate: malformed definitions are refused naming the field.
func TestValidate(t *testing.T) {
	cases := []struct {
		s    *clientv1.SchemaInfo
		want string
	}{
		{&clientv1.SchemaInfo{Type: clientv1.SchemaType_SCHEMA_TYPE_JSON, Definition: []byte("{")}, "schema.definition"},
		{&clientv1.SchemaInfo{Type: clientv1.SchemaType_SCHEMA_TYPE_JSON, Definition: []byte(`{"type":"strin"}`)}, "type"},
		{&clientv1.SchemaInfo{Type: clientv1.SchemaType_SCHEMA_TYPE_JSON, Definition: []byte(`{"properties":{"a":{"type":"object","required":"x"}}}`)}, "$.a.required"},
		{&clientv1.SchemaInfo{Type: clientv1.SchemaType_SCHEMA_TYPE_PROTOBUF, Definition: protoSchema().GetDefinition()}, "schema.message_name"},
		{&clientv1.SchemaInfo{Type: clientv1.SchemaType_SCHEMA_TYPE_PROTOBUF, Definition: protoSchema().GetDefinition(), MessageName: "test.v1.Nope"}, "test.v1.Nope"},
		{&clientv1.SchemaInfo{Type: clientv1.SchemaType_SCHEMA_TYPE_STRING, Definition: []byte("x")}, "schema.definition"},
		{&clientv1.SchemaInfo{Type: clientv1.SchemaType_SCHEMA_TYPE_AVRO, Definition: []byte(`{"type":"record","name":"X","fields":[{"name":"a","type":"strin"}]}`)}, "schema.definition"},
		{&clientv1.SchemaInfo{Type: clientv1.SchemaType_SCHEMA_TYPE_JSON, Definition: make([]byte, MaxDefinitionBytes+1)}, "limit"},
	}
	for i, c := range cases {
		err := Validate(c.s)
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("case %d: got %v, want ErrInvalid naming %q", i, err, c.want)
		}
	}
	if !Same(jsonSchema(field{"a", "string", true}), &clientv1.SchemaInfo{Type: clientv1.SchemaType_SCHEMA_TYPE_JSON,
		Definition: []byte(`{ "required": ["a"], "type": "object", "properties": {"a": {"type": "string"}} }`)}) {
		t.Error("Same: equal JSON Schemas with different spacing and key order differ")
	}
	if _, err := ParseMode("full_transitive"); err != nil {
		t.Error(err)
	}
	if _, err := ParseMode("sideways"); err == nil || !strings.Contains(err.Error(), "BACKWARD") {
		t.Errorf("ParseMode(sideways) = %v", err)
	}
}
