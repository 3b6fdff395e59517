package schemacompat

import (
	"fmt"

	"github.com/hamba/avro/v2"
)

// ParseAvro parses an Avro schema definition (JSON) with a cache of its own,
// so versions that reuse a record name never see each other's definitions.
func ParseAvro(def []byte) (avro.Schema, error) {
	s, err := avro.ParseBytesWithCache(def, "", &avro.SchemaCache{})
	if err != nil {
		return nil, fmt.Errorf("%w: schema.definition is not an Avro schema: %v", ErrInvalid, err)
	}
	return s, nil
}

// avroCanRead applies Avro's schema resolution rules (reader/writer, as
// github.com/hamba/avro checks them), naming the record field that breaks
// them: a reader field missing from the writer needs a default; a field in
// both must resolve (promotions int→long→float→double, string↔bytes,
// unions by branch).
func avroCanRead(path string, r, w avro.Schema) error {
	sc := avro.NewSchemaCompatibility()
	rr, rok := r.(*avro.RecordSchema)
	wr, wok := w.(*avro.RecordSchema)
	if rok && wok {
		for _, rf := range rr.Fields() {
			var wf *avro.Field
			for _, f := range wr.Fields() {
				if f.Name() == rf.Name() {
					wf = f
					break
				}
				for _, a := range rf.Aliases() {
					if f.Name() == a {
						wf = f
					}
				}
			}
			name := fieldName(path, rf.Name())
			if wf == nil {
				if !rf.HasDefault() {
					return fmt.Errorf("field %q is required by the reader (no default) but absent from the writer", name)
				}
				continue
			}
			if err := avroCanRead(name, rf.Type(), wf.Type()); err != nil {
				return err
			}
		}
	}
	if err := sc.Compatible(r, w); err != nil {
		return fmt.Errorf("%s: %v", where(path), err)
	}
	return nil
}
