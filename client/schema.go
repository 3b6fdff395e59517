package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/hamba/avro/v2"
	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/internal/schemacompat"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// SchemaInfo is a schema as the registry stores it (type, definition,
// version).
type SchemaInfo = clientv1.SchemaInfo

// ErrSchemaMismatch: a message cannot be decoded with the consumer's
// schema (it was written with a schema of another type, or one the
// consumer's cannot read, or the payload does not decode). The message is
// still returned: ack or nack it.
var ErrSchemaMismatch = errors.New("client: schema mismatch")

// ErrIncompatibleSchema: the broker refused a typed producer's or
// consumer's schema under the topic's compatibility mode; the text names
// the mode, the version and the field. It wraps ErrNotAllowed.
var ErrIncompatibleSchema = fmt.Errorf("%w: incompatible schema", ErrNotAllowed)

// Schema encodes values of T into message payloads and decodes them back,
// and describes itself for the topic's schema registry.
type Schema[T any] interface {
	// Info is the schema registered for the topic (type and definition).
	Info() *SchemaInfo
	// Encode serializes v.
	Encode(v T) ([]byte, error)
	// Decode deserializes a payload.
	Decode(data []byte) (T, error)
}

type stringSchema struct{}

// StringSchema is UTF-8 text (Pulsar's Schema.STRING).
func StringSchema() Schema[string] { return stringSchema{} }

func (stringSchema) Info() *SchemaInfo {
	return &SchemaInfo{Type: clientv1.SchemaType_SCHEMA_TYPE_STRING}
}
func (stringSchema) Encode(v string) ([]byte, error)    { return []byte(v), nil }
func (stringSchema) Decode(data []byte) (string, error) { return string(data), nil }

type bytesSchema struct{}

// BytesSchema is raw bytes: nothing is registered or checked (Pulsar's
// Schema.BYTES).
func BytesSchema() Schema[[]byte] { return bytesSchema{} }

func (bytesSchema) Info() *SchemaInfo {
	return &SchemaInfo{Type: clientv1.SchemaType_SCHEMA_TYPE_BYTES}
}
func (bytesSchema) Encode(v []byte) ([]byte, error)    { return v, nil }
func (bytesSchema) Decode(data []byte) ([]byte, error) { return data, nil }

type jsonSchema[T any] struct{ info *SchemaInfo }

// JSONSchema encodes T as JSON (encoding/json) and registers a JSON Schema
// generated from T: an object per struct with a property per exported
// field (its json name), required unless the field is a pointer or has
// omitempty; integers are "integer", floats "number", []byte "string",
// slices "array", maps "object".
func JSONSchema[T any]() (Schema[T], error) {
	var zero T
	doc := jsonSchemaOf(reflect.TypeOf(&zero).Elem(), 0)
	def, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("client: JSON Schema of %T: %w", zero, err)
	}
	return JSONSchemaWithDefinition[T](string(def))
}

// JSONSchemaWithDefinition encodes T as JSON and registers the given JSON
// Schema (validated here).
func JSONSchemaWithDefinition[T any](definition string) (Schema[T], error) {
	info := &SchemaInfo{Type: clientv1.SchemaType_SCHEMA_TYPE_JSON, Definition: []byte(definition)}
	if err := schemacompat.Validate(info); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	return jsonSchema[T]{info: info}, nil
}

func (s jsonSchema[T]) Info() *SchemaInfo { return proto.Clone(s.info).(*SchemaInfo) }
func (s jsonSchema[T]) Encode(v T) ([]byte, error) {
	return json.Marshal(v)
}
func (s jsonSchema[T]) Decode(data []byte) (T, error) {
	var v T
	err := json.Unmarshal(data, &v)
	return v, err
}

var (
	timeType  = reflect.TypeOf(time.Time{})
	bytesType = reflect.TypeOf([]byte(nil))
)

// jsonSchemaOf builds the JSON Schema of a Go type (recursive types are
// cut at depth 16 with an unconstrained schema).
func jsonSchemaOf(t reflect.Type, depth int) map[string]any {
	if depth > 16 {
		return map[string]any{}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == timeType:
		return map[string]any{"type": "string"}
	case t == bytesType:
		return map[string]any{"type": "string"}
	}
	switch t.Kind() {
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Slice, reflect.Array:
		return map[string]any{"type": "array", "items": jsonSchemaOf(t.Elem(), depth+1)}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": jsonSchemaOf(t.Elem(), depth+1)}
	case reflect.Struct:
		props := map[string]any{}
		required := []any{}
		addStructFields(t, props, &required, depth)
		return map[string]any{"type": "object", "properties": props, "required": required}
	}
	return map[string]any{}
}

func addStructFields(t reflect.Type, props map[string]any, required *[]any, depth int) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			et := f.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				addStructFields(et, props, required, depth)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		props[name] = jsonSchemaOf(f.Type, depth+1)
		if f.Type.Kind() != reflect.Pointer && !strings.Contains(","+opts+",", ",omitempty,") && !strings.Contains(","+opts+",", ",omitzero,") {
			*required = append(*required, name)
		}
	}
}

type protoSchema[T proto.Message] struct{ info *SchemaInfo }

// ProtoSchema encodes T (a generated protobuf message type, such as
// *pb.Event) with protobuf and registers its descriptor: a
// FileDescriptorSet of its file and every file it imports, and the
// message's full name.
func ProtoSchema[T proto.Message]() (Schema[T], error) {
	var zero T
	md := zero.ProtoReflect().Descriptor()
	var files []*descriptorpb.FileDescriptorProto
	seen := map[string]bool{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		imps := fd.Imports()
		for i := 0; i < imps.Len(); i++ {
			add(imps.Get(i).FileDescriptor)
		}
		files = append(files, protodesc.ToFileDescriptorProto(fd))
	}
	add(md.ParentFile())
	def, err := proto.MarshalOptions{Deterministic: true}.Marshal(&descriptorpb.FileDescriptorSet{File: files})
	if err != nil {
		return nil, fmt.Errorf("client: descriptor of %s: %w", md.FullName(), err)
	}
	info := &SchemaInfo{Type: clientv1.SchemaType_SCHEMA_TYPE_PROTOBUF, Definition: def, MessageName: string(md.FullName())}
	if err := schemacompat.Validate(info); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	return protoSchema[T]{info: info}, nil
}

func (s protoSchema[T]) Info() *SchemaInfo { return proto.Clone(s.info).(*SchemaInfo) }
func (s protoSchema[T]) Encode(v T) ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(v)
}
func (s protoSchema[T]) Decode(data []byte) (T, error) {
	var zero T
	v := zero.ProtoReflect().Type().New().Interface().(T)
	err := proto.Unmarshal(data, v)
	return v, err
}

type avroSchema[T any] struct {
	info   *SchemaInfo
	schema avro.Schema
}

// AvroSchema encodes T as Avro binary with the given Avro schema (JSON; T's
// fields map to record fields by their `avro:"name"` tags, as in
// github.com/hamba/avro). Messages written with another registered version
// are decoded with Avro schema resolution (writer's schema to this one).
func AvroSchema[T any](definition string) (Schema[T], error) {
	info := &SchemaInfo{Type: clientv1.SchemaType_SCHEMA_TYPE_AVRO, Definition: []byte(definition)}
	if err := schemacompat.Validate(info); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	s, err := schemacompat.ParseAvro(info.Definition)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	return avroSchema[T]{info: info, schema: s}, nil
}

func (s avroSchema[T]) Info() *SchemaInfo { return proto.Clone(s.info).(*SchemaInfo) }
func (s avroSchema[T]) Encode(v T) ([]byte, error) {
	return avro.Marshal(s.schema, v)
}
func (s avroSchema[T]) Decode(data []byte) (T, error) {
	var v T
	err := avro.Unmarshal(s.schema, data, &v)
	return v, err
}

// DecodeWriter decodes data written with the writer schema (resolution).
func (s avroSchema[T]) DecodeWriter(data []byte, writer *SchemaInfo) (T, error) {
	var v T
	w, err := schemacompat.ParseAvro(writer.GetDefinition())
	if err != nil {
		return v, err
	}
	composite, err := avro.NewSchemaCompatibility().Resolve(s.schema, w)
	if err != nil {
		return v, err
	}
	err = avro.Unmarshal(composite, data, &v)
	return v, err
}

// writerDecoder is implemented by schemas whose payloads cannot be decoded
// without the writer's schema (Avro binary).
type writerDecoder[T any] interface {
	DecodeWriter(data []byte, writer *SchemaInfo) (T, error)
}
