package schemacompat

import (
	"fmt"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// protoMessage resolves a PROTOBUF schema's root message descriptor.
func protoMessage(s *clientv1.SchemaInfo) (protoreflect.MessageDescriptor, error) {
	if s.GetMessageName() == "" {
		return nil, fmt.Errorf("%w: schema.message_name is required for PROTOBUF (the root message's full name)", ErrInvalid)
	}
	var fds descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(s.GetDefinition(), &fds); err != nil {
		return nil, fmt.Errorf("%w: schema.definition is not a serialized FileDescriptorSet: %v", ErrInvalid, err)
	}
	files, err := protodesc.NewFiles(&fds)
	if err != nil {
		return nil, fmt.Errorf("%w: schema.definition: %v", ErrInvalid, err)
	}
	d, err := files.FindDescriptorByName(protoreflect.FullName(s.GetMessageName()))
	if err != nil {
		return nil, fmt.Errorf("%w: schema.message_name %q is not in schema.definition", ErrInvalid, s.GetMessageName())
	}
	md, ok := d.(protoreflect.MessageDescriptor)
	if !ok {
		return nil, fmt.Errorf("%w: schema.message_name %q is not a message", ErrInvalid, s.GetMessageName())
	}
	return md, nil
}

// wireGroup maps a field kind to its class of wire-compatible kinds
// (protobuf's "updating a message type" rules): int32, uint32, int64,
// uint64, bool and enum share the varint encoding; sint32/sint64;
// fixed32/sfixed32; fixed64/sfixed64; string/bytes.
func wireGroup(k protoreflect.Kind) string {
	switch k {
	case protoreflect.Int32Kind, protoreflect.Uint32Kind, protoreflect.Int64Kind, protoreflect.Uint64Kind, protoreflect.BoolKind, protoreflect.EnumKind:
		return "varint"
	case protoreflect.Sint32Kind, protoreflect.Sint64Kind:
		return "zigzag"
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind:
		return "fixed32"
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind:
		return "fixed64"
	case protoreflect.StringKind, protoreflect.BytesKind:
		return "bytes"
	}
	return k.String()
}

// protoCanRead compares messages field by field number: a field in both
// must keep a wire-compatible kind and its cardinality; a field the reader
// requires (proto2 required) must be required by the writer; fields the
// writer has and the reader lacks are unknown fields (kept, compatible).
func protoCanRead(r, w protoreflect.MessageDescriptor, seen map[[2]string]bool) error {
	key := [2]string{string(r.FullName()), string(w.FullName())}
	if seen[key] {
		return nil
	}
	seen[key] = true
	rf := r.Fields()
	for i := 0; i < rf.Len(); i++ {
		f := rf.Get(i)
		wf := w.Fields().ByNumber(f.Number())
		name := fmt.Sprintf("%s.%s (number %d)", r.FullName(), f.Name(), f.Number())
		if wf == nil {
			if f.Cardinality() == protoreflect.Required {
				return fmt.Errorf("field %s is required by the reader but absent from the writer", name)
			}
			continue
		}
		if f.Cardinality() == protoreflect.Required && wf.Cardinality() != protoreflect.Required {
			return fmt.Errorf("field %s is required by the reader but optional in the writer", name)
		}
		if (f.Cardinality() == protoreflect.Repeated) != (wf.Cardinality() == protoreflect.Repeated) || f.IsMap() != wf.IsMap() {
			return fmt.Errorf("field %s: cardinality changed from %s to %s", name, wf.Cardinality(), f.Cardinality())
		}
		if wireGroup(f.Kind()) != wireGroup(wf.Kind()) {
			return fmt.Errorf("field %s: type changed from %s to %s", name, wf.Kind(), f.Kind())
		}
		if f.Kind() == protoreflect.MessageKind || f.Kind() == protoreflect.GroupKind {
			if err := protoCanRead(f.Message(), wf.Message(), seen); err != nil {
				return err
			}
		}
	}
	return nil
}
