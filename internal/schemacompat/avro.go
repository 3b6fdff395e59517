package schemacompat

import (
	"fmt"

	"github.com/hamba/avro/v2"
)

// ParseAvro parses an Avro schema definition (JSON) with a cache of its own,
// so versions that reuse a record name never see each other's definitions.
// The definition's nesting is bounded first (maxDefinitionDepth), so the
// recursive parse and the checks that follow stay shallow.
//
// A panic inside the parser is returned as ErrInvalid: hamba/avro v2.20.0
// indexes an empty union when a field has one and a default
// ({"name":"a","type":[],"default":null}, found by FuzzAvroSchema), and a
// schema a client registers must never take the broker down. The cache is
// private to this call, so nothing it half-built survives.
func ParseAvro(def []byte) (s avro.Schema, err error) {
	if err := checkJSONDepth(def, maxDefinitionDepth); err != nil {
		return nil, err
	}
	defer func() {
		if p := recover(); p != nil {
			s, err = nil, fmt.Errorf("%w: schema.definition is not an Avro schema: the parser failed: %v", ErrInvalid, p)
		}
	}()
	s, err = avro.ParseBytesWithCache(def, "", &avro.SchemaCache{})
	if err != nil {
		return nil, fmt.Errorf("%w: schema.definition is not an Avro schema: %v", ErrInvalid, err)
	}
	return s, nil
}

// avroCanRead applies Avro's schema resolution rules (reader/writer; the
// rules github.com/hamba/avro's SchemaCompatibility checks), naming the
// record field that breaks them: a reader field missing from the writer
// needs a default; a field in both must resolve (promotions
// int→long→float→double, string↔bytes, unions by branch); an enum reader
// must hold every writer symbol unless it has a default.
//
// It is our own walk rather than hamba's because hamba scans lists for
// every symbol and field (O(n·m): two enums of 100 000 symbols cost
// minutes); here symbols, fields and aliases are looked up in maps, and
// each (reader, writer) pair of named types is visited once.
func avroCanRead(path string, r, w avro.Schema) error {
	return (&avroChecker{seen: map[[2]avro.Schema]error{}}).canRead(path, r, w)
}

type avroChecker struct {
	// seen holds the result of each (reader, writer) pair already checked,
	// errAvroInProgress while it is being checked: a recursive named type
	// ends there (assumed compatible, as hamba does), and each pair costs
	// its size once.
	seen map[[2]avro.Schema]error
}

// errAvroInProgress marks a pair whose check has not finished.
var errAvroInProgress = fmt.Errorf("in progress")

func (c *avroChecker) canRead(path string, r, w avro.Schema) error {
	if ref, ok := r.(*avro.RefSchema); ok {
		r = ref.Schema()
	}
	if ref, ok := w.(*avro.RefSchema); ok {
		w = ref.Schema()
	}
	key := [2]avro.Schema{r, w}
	if err, ok := c.seen[key]; ok {
		if err == errAvroInProgress {
			return nil
		}
		return err
	}
	c.seen[key] = errAvroInProgress
	err := c.check(path, r, w)
	c.seen[key] = err
	return err
}

func (c *avroChecker) check(path string, r, w avro.Schema) error {
	if r.Type() != w.Type() {
		if wu, ok := w.(*avro.UnionSchema); ok {
			// Every branch the writer may use must be readable.
			for _, b := range wu.Types() {
				if err := c.canRead(path, r, b); err != nil {
					return err
				}
			}
			return nil
		}
		if ru, ok := r.(*avro.UnionSchema); ok {
			// Some reader branch must read the writer's type.
			for _, b := range ru.Types() {
				if c.canRead(path, b, w) == nil {
					return nil
				}
			}
			return fmt.Errorf("%s: reader union lacking writer schema %s", where(path), w.Type())
		}
		if avroPromotes(w.Type(), r.Type()) {
			return nil
		}
		return fmt.Errorf("%s: reader schema %s not compatible with writer schema %s", where(path), r.Type(), w.Type())
	}

	switch rs := r.(type) {
	case *avro.ArraySchema:
		return c.canRead(path+"[]", rs.Items(), w.(*avro.ArraySchema).Items())
	case *avro.MapSchema:
		return c.canRead(path+"{}", rs.Values(), w.(*avro.MapSchema).Values())
	case *avro.FixedSchema:
		ws := w.(*avro.FixedSchema)
		if err := avroSameName(path, rs, ws); err != nil {
			return err
		}
		if rs.Size() != ws.Size() {
			return fmt.Errorf("%s: %s reader and writer fixed sizes do not match", where(path), rs.FullName())
		}
	case *avro.EnumSchema:
		ws := w.(*avro.EnumSchema)
		if err := avroSameName(path, rs, ws); err != nil {
			return err
		}
		if rs.HasDefault() {
			return nil // an unknown symbol reads as the default
		}
		syms := stringSet(rs.Symbols())
		for _, s := range ws.Symbols() {
			if !setHas(syms, s) {
				return fmt.Errorf("%s: reader %s is missing symbol %s", where(path), rs.FullName(), s)
			}
		}
	case *avro.RecordSchema:
		ws := w.(*avro.RecordSchema)
		if err := avroSameName(path, rs, ws); err != nil {
			return err
		}
		// A reader field matches the first writer field (in writer order)
		// named like it or like one of its aliases.
		wf := ws.Fields()
		byName := make(map[string]int, len(wf))
		for i, f := range wf {
			if _, dup := byName[f.Name()]; !dup {
				byName[f.Name()] = i
			}
		}
		for _, f := range rs.Fields() {
			match := -1
			for _, n := range append([]string{f.Name()}, f.Aliases()...) {
				compared()
				if i, ok := byName[n]; ok && (match < 0 || i < match) {
					match = i
				}
			}
			name := fieldName(path, f.Name())
			if match < 0 {
				if !f.HasDefault() {
					return fmt.Errorf("field %q is required by the reader (no default) but absent from the writer", name)
				}
				continue
			}
			if err := c.canRead(name, f.Type(), wf[match].Type()); err != nil {
				return err
			}
		}
	case *avro.UnionSchema:
		for _, b := range w.(*avro.UnionSchema).Types() {
			if err := c.canRead(path, r, b); err != nil {
				return err
			}
		}
	}
	return nil
}

// avroPromotes reports whether a writer's primitive type w reads as r
// (Avro's promotions).
func avroPromotes(w, r avro.Type) bool {
	switch w {
	case avro.Int:
		return r == avro.Long || r == avro.Float || r == avro.Double
	case avro.Long:
		return r == avro.Float || r == avro.Double
	case avro.Float:
		return r == avro.Double
	case avro.String:
		return r == avro.Bytes
	case avro.Bytes:
		return r == avro.String
	}
	return false
}

// avroSameName checks that named types match by full name or by one of the
// reader's aliases.
func avroSameName(path string, r, w avro.NamedSchema) error {
	if r.FullName() == w.FullName() {
		return nil
	}
	for _, a := range r.Aliases() {
		if a == w.FullName() {
			return nil
		}
	}
	return fmt.Errorf("%s: reader schema %s and writer schema %s names do not match", where(path), r.FullName(), w.FullName())
}
