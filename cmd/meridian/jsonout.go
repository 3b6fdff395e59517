package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// protoJSON renders a protocol message as JSON for --output json and the
// text views: protojson's field names and order, but 64-bit integers
// (int64, uint64, sint64, fixed64, sfixed64 and their wrappers) as JSON
// numbers, not the strings protojson prints (its choice for JavaScript's
// 53-bit numbers; `jq '.msgsInTotal > 10'` must work). indent "" gives one
// line. Every admin command prints protos through it (adminOut.message).
func protoJSON(m proto.Message, indent string) ([]byte, error) {
	raw, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var out bytes.Buffer
	if err := numbersFor(dec, &out, m.ProtoReflect().Descriptor()); err != nil {
		return nil, fmt.Errorf("re-encode %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	if indent == "" {
		return out.Bytes(), nil
	}
	var ind bytes.Buffer
	if err := json.Indent(&ind, out.Bytes(), "", indent); err != nil {
		return nil, err
	}
	return ind.Bytes(), nil
}

// is64 reports whether a field of kind k prints as a string in protojson.
func is64(k protoreflect.Kind) bool {
	switch k {
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return true
	}
	return false
}

// numbersFor copies one JSON value of message type md from dec to out
// (compact), turning the quoted 64-bit integers of its fields into numbers.
// Field order is kept (a token copy, not a map round trip).
func numbersFor(dec *json.Decoder, out *bytes.Buffer, md protoreflect.MessageDescriptor) error {
	switch md.FullName() {
	case "google.protobuf.Int64Value", "google.protobuf.UInt64Value":
		return copyValue(dec, out, true)
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		// A well-known type with a special JSON form (Timestamp, Duration,
		// Struct...) or null: copied as is.
		return writeTokenRest(dec, out, tok)
	}
	out.WriteByte('{')
	for first := true; dec.More(); first = false {
		kt, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := kt.(string)
		if !first {
			out.WriteByte(',')
		}
		writeJSON(out, key)
		out.WriteByte(':')
		fd := md.Fields().ByJSONName(key)
		if fd == nil {
			fd = md.Fields().ByName(protoreflect.Name(key))
		}
		if err := fieldValue(dec, out, fd); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // '}'
		return err
	}
	out.WriteByte('}')
	return nil
}

// fieldValue copies the JSON value of field fd (nil: unknown, copied as is).
func fieldValue(dec *json.Decoder, out *bytes.Buffer, fd protoreflect.FieldDescriptor) error {
	if fd == nil {
		return copyValue(dec, out, false)
	}
	one := func(k protoreflect.Kind, msg protoreflect.MessageDescriptor) error {
		if k == protoreflect.MessageKind || k == protoreflect.GroupKind {
			return numbersFor(dec, out, msg)
		}
		return copyValue(dec, out, is64(k))
	}
	switch {
	case fd.IsMap():
		return container(dec, out, '{', func() error {
			return one(fd.MapValue().Kind(), fd.MapValue().Message())
		})
	case fd.IsList():
		return container(dec, out, '[', func() error { return one(fd.Kind(), fd.Message()) })
	}
	return one(fd.Kind(), fd.Message())
}

// container copies a JSON object (open '{': map, each value by elem) or
// array (open '['), or a null in its place.
func container(dec *json.Decoder, out *bytes.Buffer, open json.Delim, elem func() error) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != open {
		return writeTokenRest(dec, out, tok)
	}
	out.WriteByte(byte(open))
	for first := true; dec.More(); first = false {
		if !first {
			out.WriteByte(',')
		}
		if open == '{' {
			kt, err := dec.Token()
			if err != nil {
				return err
			}
			k, _ := kt.(string)
			writeJSON(out, k)
			out.WriteByte(':')
		}
		if err := elem(); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return err
	}
	if open == '{' {
		out.WriteByte('}')
	} else {
		out.WriteByte(']')
	}
	return nil
}

// copyValue copies one JSON value; with number set, a string holding an
// integer is written as a number.
func copyValue(dec *json.Decoder, out *bytes.Buffer, number bool) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if s, ok := tok.(string); ok && number {
		if n := json.Number(s); isInteger(s) {
			out.WriteString(n.String())
			return nil
		}
	}
	return writeTokenRest(dec, out, tok)
}

// isInteger reports whether s is a JSON integer literal.
func isInteger(s string) bool {
	if s == "" {
		return false
	}
	if s[0] == '-' {
		s = s[1:]
	}
	if s == "" || len(s) > 1 && s[0] == '0' {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// writeTokenRest writes tok and, when it opens an object or array, the
// rest of that value, unchanged.
func writeTokenRest(dec *json.Decoder, out *bytes.Buffer, tok json.Token) error {
	d, ok := tok.(json.Delim)
	if !ok {
		writeJSON(out, tok)
		return nil
	}
	out.WriteByte(byte(d))
	for first := true; dec.More(); first = false {
		if !first {
			out.WriteByte(',')
		}
		if d == '{' {
			kt, err := dec.Token()
			if err != nil {
				return err
			}
			writeJSON(out, kt)
			out.WriteByte(':')
		}
		if err := copyValue(dec, out, false); err != nil {
			return err
		}
	}
	end, err := dec.Token()
	if err != nil {
		return err
	}
	out.WriteByte(byte(end.(json.Delim)))
	return nil
}

// writeJSON writes a scalar token (string, json.Number, bool, nil).
func writeJSON(out *bytes.Buffer, v any) {
	if n, ok := v.(json.Number); ok {
		out.WriteString(n.String())
		return
	}
	b, _ := json.Marshal(v)
	out.Write(b)
}

// printProto prints m through protoJSON: one line when oneLine, else
// indented; on an encoding failure, the message's text form.
func printProto(w io.Writer, m proto.Message, oneLine bool) {
	indent := "  "
	if oneLine {
		indent = ""
	}
	b, err := protoJSON(m, indent)
	if err != nil {
		fmt.Fprintf(w, "%v\n", m)
		return
	}
	fmt.Fprintln(w, string(b))
}
