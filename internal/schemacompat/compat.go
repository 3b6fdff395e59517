// Package schemacompat validates schema definitions and decides whether a
// schema version may follow the registered ones under a compatibility mode
// (issue 10, part schemas). It is shared by the broker (registry checks) and
// the Go client (typed consumers checking a message's writer schema).
//
// Compatibility is about schema evolution, not about validating documents:
// CanRead(reader, writer) says whether every value written with writer can
// be decoded by a program using reader. BACKWARD checks CanRead(new, old),
// FORWARD CanRead(old, new), FULL both; the transitive modes check every
// registered version instead of the latest; NONE accepts every change.
package schemacompat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// MaxDefinitionBytes caps a schema definition (JSON Schema text or
// serialized FileDescriptorSet).
const MaxDefinitionBytes = 256 << 10

// MaxPropertyBytes caps the total size of a schema's properties.
const MaxPropertyBytes = 16 << 10

// compareHook, when set (by tests only), is called once per set probe a
// compatibility check makes (an enum value, a symbol, a field or type
// looked up), so tests can assert the checks stay linear in the size of the
// schemas without timing them.
var compareHook func()

func compared() {
	if compareHook != nil {
		compareHook()
	}
}

// ErrInvalid reports a malformed schema; the text names the field.
var ErrInvalid = errors.New("schema: invalid")

// ErrIncompatible reports a schema that breaks the compatibility mode; the
// text names the mode, the version and the field that breaks it.
var ErrIncompatible = errors.New("schema: incompatible")

// IsNone reports whether s carries no schema (nil, NONE or BYTES): such a
// schema is never registered and never checked.
func IsNone(s *clientv1.SchemaInfo) bool {
	return s == nil || s.GetType() == clientv1.SchemaType_SCHEMA_TYPE_NONE || s.GetType() == clientv1.SchemaType_SCHEMA_TYPE_BYTES
}

// TypeName is the short name of a schema type ("JSON", "PROTOBUF", ...).
func TypeName(t clientv1.SchemaType) string {
	if n, ok := clientv1.SchemaType_name[int32(t)]; ok {
		return n[len("SCHEMA_TYPE_"):]
	}
	return fmt.Sprintf("type(%d)", t)
}

// ModeName is the short name of a compatibility mode ("BACKWARD", ...).
func ModeName(m clientv1.SchemaCompatibility) string {
	if n, ok := clientv1.SchemaCompatibility_name[int32(m)]; ok {
		return n[len("SCHEMA_COMPATIBILITY_"):]
	}
	return fmt.Sprintf("mode(%d)", m)
}

// ParseMode parses a mode name, case-insensitively, with or without the
// SCHEMA_COMPATIBILITY_ prefix ("backward", "full_transitive", "none").
// Pulsar's ALWAYS_COMPATIBLE is accepted as NONE.
func ParseMode(s string) (clientv1.SchemaCompatibility, error) {
	u := bytes.ToUpper([]byte(s))
	name := string(bytes.TrimPrefix(u, []byte("SCHEMA_COMPATIBILITY_")))
	if name == "ALWAYS_COMPATIBLE" {
		name = "NONE"
	}
	if v, ok := clientv1.SchemaCompatibility_value["SCHEMA_COMPATIBILITY_"+name]; ok && v != 0 {
		return clientv1.SchemaCompatibility(v), nil
	}
	return 0, fmt.Errorf("%w: compatibility %q is not one of BACKWARD, FORWARD, FULL, NONE, BACKWARD_TRANSITIVE, FORWARD_TRANSITIVE, FULL_TRANSITIVE", ErrInvalid, s)
}

// ParseType parses a schema type name case-insensitively ("json", "PROTOBUF").
func ParseType(s string) (clientv1.SchemaType, error) {
	u := string(bytes.TrimPrefix(bytes.ToUpper([]byte(s)), []byte("SCHEMA_TYPE_")))
	if v, ok := clientv1.SchemaType_value["SCHEMA_TYPE_"+u]; ok {
		return clientv1.SchemaType(v), nil
	}
	return 0, fmt.Errorf("%w: type %q is not one of NONE, BYTES, STRING, JSON, PROTOBUF, AVRO", ErrInvalid, s)
}

// Validate checks a schema's shape: a known type, a parseable definition
// within MaxDefinitionBytes, a root message for protobuf.
func Validate(s *clientv1.SchemaInfo) error {
	if s == nil {
		return fmt.Errorf("%w: schema is missing", ErrInvalid)
	}
	if n := len(s.GetDefinition()); n > MaxDefinitionBytes {
		return fmt.Errorf("%w: schema.definition is %d bytes, limit %d", ErrInvalid, n, MaxDefinitionBytes)
	}
	np := 0
	for k, v := range s.GetProperties() {
		np += len(k) + len(v)
	}
	if np > MaxPropertyBytes {
		return fmt.Errorf("%w: schema.properties are %d bytes, limit %d", ErrInvalid, np, MaxPropertyBytes)
	}
	switch s.GetType() {
	case clientv1.SchemaType_SCHEMA_TYPE_NONE, clientv1.SchemaType_SCHEMA_TYPE_BYTES, clientv1.SchemaType_SCHEMA_TYPE_STRING:
		if len(s.GetDefinition()) != 0 {
			return fmt.Errorf("%w: schema.definition must be empty for type %s", ErrInvalid, TypeName(s.GetType()))
		}
		if s.GetMessageName() != "" {
			return fmt.Errorf("%w: schema.message_name is only for PROTOBUF", ErrInvalid)
		}
		return nil
	case clientv1.SchemaType_SCHEMA_TYPE_JSON:
		if s.GetMessageName() != "" {
			return fmt.Errorf("%w: schema.message_name is only for PROTOBUF", ErrInvalid)
		}
		_, err := parseJSON(s.GetDefinition())
		return err
	case clientv1.SchemaType_SCHEMA_TYPE_PROTOBUF:
		_, err := protoMessage(s)
		return err
	case clientv1.SchemaType_SCHEMA_TYPE_AVRO:
		if s.GetMessageName() != "" {
			return fmt.Errorf("%w: schema.message_name is only for PROTOBUF", ErrInvalid)
		}
		_, err := ParseAvro(s.GetDefinition())
		return err
	default:
		return fmt.Errorf("%w: schema.type %d is not NONE, BYTES, STRING, JSON, PROTOBUF or AVRO", ErrInvalid, s.GetType())
	}
}

// Canonical returns the definition in a canonical form used to compare
// schemas: JSON Schemas re-encoded with sorted keys and no spaces; Avro
// schemas in Avro's parsing canonical form; other types as given.
func Canonical(s *clientv1.SchemaInfo) []byte {
	switch s.GetType() {
	case clientv1.SchemaType_SCHEMA_TYPE_AVRO:
		if a, err := ParseAvro(s.GetDefinition()); err == nil {
			return []byte(a.String())
		}
		return s.GetDefinition()
	case clientv1.SchemaType_SCHEMA_TYPE_JSON:
	default:
		return s.GetDefinition()
	}
	var v any
	if err := json.Unmarshal(s.GetDefinition(), &v); err != nil {
		return s.GetDefinition()
	}
	out, err := json.Marshal(v)
	if err != nil {
		return s.GetDefinition()
	}
	return out
}

// Same reports whether a and b are the same schema (type, canonical
// definition, root message); properties and version do not count.
func Same(a, b *clientv1.SchemaInfo) bool {
	return a.GetType() == b.GetType() && a.GetMessageName() == b.GetMessageName() && bytes.Equal(Canonical(a), Canonical(b))
}

// CanRead returns nil when every value written with writer decodes with
// reader, else an error naming the first field that breaks it. Both
// schemas must be valid.
func CanRead(reader, writer *clientv1.SchemaInfo) error {
	if reader.GetType() != writer.GetType() {
		return fmt.Errorf("schema type changed from %s to %s", TypeName(writer.GetType()), TypeName(reader.GetType()))
	}
	switch reader.GetType() {
	case clientv1.SchemaType_SCHEMA_TYPE_JSON:
		r, err := parseJSON(reader.GetDefinition())
		if err != nil {
			return err
		}
		w, err := parseJSON(writer.GetDefinition())
		if err != nil {
			return err
		}
		return jsonCanRead("", r, w)
	case clientv1.SchemaType_SCHEMA_TYPE_PROTOBUF:
		r, err := protoMessage(reader)
		if err != nil {
			return err
		}
		w, err := protoMessage(writer)
		if err != nil {
			return err
		}
		return protoCanRead(r, w, map[[2]string]bool{})
	case clientv1.SchemaType_SCHEMA_TYPE_AVRO:
		r, err := ParseAvro(reader.GetDefinition())
		if err != nil {
			return err
		}
		w, err := ParseAvro(writer.GetDefinition())
		if err != nil {
			return err
		}
		return avroCanRead("", r, w)
	default:
		return nil
	}
}

// Check decides whether candidate may become the next version after
// history (the registered versions since the last deletion, oldest first)
// under mode. It returns nil or an error wrapping ErrIncompatible that names
// the mode, the version it conflicts with and the field.
func Check(mode clientv1.SchemaCompatibility, candidate *clientv1.SchemaInfo, history []*clientv1.SchemaInfo) error {
	if len(history) == 0 || mode == clientv1.SchemaCompatibility_SCHEMA_COMPATIBILITY_NONE {
		return nil
	}
	if mode == clientv1.SchemaCompatibility_SCHEMA_COMPATIBILITY_UNSPECIFIED {
		mode = clientv1.SchemaCompatibility_SCHEMA_COMPATIBILITY_BACKWARD
	}
	targets := history[len(history)-1:]
	switch mode {
	case clientv1.SchemaCompatibility_SCHEMA_COMPATIBILITY_BACKWARD_TRANSITIVE,
		clientv1.SchemaCompatibility_SCHEMA_COMPATIBILITY_FORWARD_TRANSITIVE,
		clientv1.SchemaCompatibility_SCHEMA_COMPATIBILITY_FULL_TRANSITIVE:
		targets = history
	}
	backward, forward := false, false
	switch mode {
	case clientv1.SchemaCompatibility_SCHEMA_COMPATIBILITY_BACKWARD, clientv1.SchemaCompatibility_SCHEMA_COMPATIBILITY_BACKWARD_TRANSITIVE:
		backward = true
	case clientv1.SchemaCompatibility_SCHEMA_COMPATIBILITY_FORWARD, clientv1.SchemaCompatibility_SCHEMA_COMPATIBILITY_FORWARD_TRANSITIVE:
		forward = true
	case clientv1.SchemaCompatibility_SCHEMA_COMPATIBILITY_FULL, clientv1.SchemaCompatibility_SCHEMA_COMPATIBILITY_FULL_TRANSITIVE:
		backward, forward = true, true
	default:
		return fmt.Errorf("%w: compatibility mode %d is unknown", ErrInvalid, mode)
	}
	for i := len(targets) - 1; i >= 0; i-- {
		old := targets[i]
		if old.GetType() != candidate.GetType() {
			return fmt.Errorf("%w (%s): schema type changed from %s (version %d) to %s", ErrIncompatible, ModeName(mode), TypeName(old.GetType()), old.GetVersion(), TypeName(candidate.GetType()))
		}
		if backward {
			if err := CanRead(candidate, old); err != nil {
				return fmt.Errorf("%w (%s): the new schema cannot read data written with version %d: %v", ErrIncompatible, ModeName(mode), old.GetVersion(), err)
			}
		}
		if forward {
			if err := CanRead(old, candidate); err != nil {
				return fmt.Errorf("%w (%s): readers of version %d cannot read data written with the new schema: %v", ErrIncompatible, ModeName(mode), old.GetVersion(), err)
			}
		}
	}
	return nil
}
