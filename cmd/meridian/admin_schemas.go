package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/client"
	"github.com/meridianmq/meridian/internal/schemacompat"
	"github.com/spf13/cobra"
)

// `meridian admin schemas`: the per-topic schema registry (Pulsar's
// `pulsar-admin schemas` plus the compatibility settings).

// schemaFileFlags read a schema from --file (and --type, --message-name,
// --property).
type schemaFileFlags struct {
	file, typ, messageName string
	props                  []string
	info                   *client.SchemaInfo
}

func (f *schemaFileFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVarP(&f.file, "file", "f", "", "schema file: a JSON Schema (--type json), an Avro schema (--type avro), a FileDescriptorSet from `protoc --include_imports --descriptor_set_out` (--type protobuf), or without --type Pulsar's schema file {\"type\":\"JSON\",\"schema\":\"...\",\"properties\":{}}")
	fl.StringVar(&f.typ, "type", "", "schema type: string, json, protobuf or avro (default: read from a Pulsar schema file)")
	fl.StringVar(&f.messageName, "message-name", "", "protobuf: the root message's full name (package.Message)")
	fl.StringArrayVar(&f.props, "property", nil, "KEY=VALUE stored with the version (repeatable)")
}

// load builds the schema from the flags; errors name the flag.
func (f *schemaFileFlags) load() error {
	info := &client.SchemaInfo{Properties: map[string]string{}}
	for _, p := range f.props {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return fmt.Errorf("--property %q: want KEY=VALUE", p)
		}
		info.Properties[k] = v
	}
	var data []byte
	if f.file != "" {
		var err error
		if data, err = os.ReadFile(f.file); err != nil {
			return fmt.Errorf("--file: %v", err)
		}
	}
	if f.typ == "" {
		if f.file == "" {
			return fmt.Errorf("--file or --type is required")
		}
		// Pulsar's schema definition file.
		var pf struct {
			Type       string            `json:"type"`
			Schema     string            `json:"schema"`
			Properties map[string]string `json:"properties"`
		}
		if err := json.Unmarshal(data, &pf); err != nil || pf.Type == "" {
			return fmt.Errorf("--file %s: without --type it must be a Pulsar schema file {\"type\":\"JSON\",\"schema\":\"...\"}", f.file)
		}
		t, err := schemacompat.ParseType(pf.Type)
		if err != nil {
			return fmt.Errorf("--file %s: \"type\" %q is not one of STRING, JSON, PROTOBUF, AVRO", f.file, pf.Type)
		}
		info.Type, info.Definition = t, []byte(pf.Schema)
		for k, v := range pf.Properties {
			if _, set := info.Properties[k]; !set {
				info.Properties[k] = v
			}
		}
	} else {
		t, err := schemacompat.ParseType(f.typ)
		if err != nil || t == clientv1.SchemaType_SCHEMA_TYPE_NONE || t == clientv1.SchemaType_SCHEMA_TYPE_BYTES {
			return fmt.Errorf("--type %q is not one of string, json, protobuf, avro", f.typ)
		}
		info.Type, info.Definition = t, data
		if t != clientv1.SchemaType_SCHEMA_TYPE_STRING && f.file == "" {
			return fmt.Errorf("--file is required for --type %s", f.typ)
		}
	}
	info.MessageName = f.messageName
	if err := schemacompat.Validate(info); err != nil {
		return fmt.Errorf("%s", strings.TrimPrefix(err.Error(), schemacompat.ErrInvalid.Error()+": "))
	}
	f.info = info
	return nil
}

// schemaView is the text/JSON view of a version.
func printSchema(out *adminOut, s *client.SchemaInfo) {
	if out.json {
		out.message(s)
		return
	}
	if s.GetDeleted() {
		fmt.Fprintf(out.w, "version %d deleted at %s\n", s.GetVersion(), time.UnixMilli(s.GetCreatedMs()).UTC().Format(time.RFC3339))
		return
	}
	fmt.Fprintf(out.w, "version %d type %s created %s", s.GetVersion(), schemacompat.TypeName(s.GetType()), time.UnixMilli(s.GetCreatedMs()).UTC().Format(time.RFC3339))
	if s.GetMessageName() != "" {
		fmt.Fprintf(out.w, " message %s", s.GetMessageName())
	}
	fmt.Fprintln(out.w)
	for k, v := range s.GetProperties() {
		fmt.Fprintf(out.w, "property %s=%s\n", k, v)
	}
	switch s.GetType() {
	case clientv1.SchemaType_SCHEMA_TYPE_JSON, clientv1.SchemaType_SCHEMA_TYPE_AVRO:
		fmt.Fprintln(out.w, string(s.GetDefinition()))
	case clientv1.SchemaType_SCHEMA_TYPE_PROTOBUF:
		fmt.Fprintf(out.w, "FileDescriptorSet, %d bytes (--output json shows it in base64)\n", len(s.GetDefinition()))
	}
}

// isNamespaceArg reports whether a name is "tenant/ns" (one slash) rather
// than a topic.
func isNamespaceArg(name string) bool { return strings.Count(name, "/") == 1 }

func newSchemasAdminCmd(o *adminOpts) *cobra.Command {
	g := &cobra.Command{Use: "schemas", Short: "Topic schema registry: upload, get, versions, delete, compatibility", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return fmt.Errorf("admin schemas: missing action (%s)", subNames(cmd))
		}}

	upf := &schemaFileFlags{}
	upload := &cobra.Command{Use: "upload TOPIC -f FILE [--type json|protobuf|avro|string] [--message-name M]",
		Short:   "Register a schema version for a topic (checked against its compatibility mode)",
		PreRunE: func(*cobra.Command, []string) error { return upf.load() },
		RunE: adminRun(o, 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
			v, existing, err := a.UploadSchema(ctx, args[0], upf.info)
			if err != nil {
				return err
			}
			if out.json {
				(&lineWriter{w: out.w}).json(map[string]any{"topic": args[0], "version": v, "existing": existing})
				return nil
			}
			if existing {
				fmt.Fprintf(out.w, "schema of %s already registered as version %d\n", args[0], v)
			} else {
				fmt.Fprintf(out.w, "registered schema version %d of %s\n", v, args[0])
			}
			return nil
		})}
	upf.register(upload)

	var version int32
	get := &cobra.Command{Use: "get TOPIC [--version N]", Short: "Show the latest schema of a topic, or one version",
		PreRunE: func(*cobra.Command, []string) error {
			if version < 0 {
				return fmt.Errorf("--version %d: must be >= 1 (0 = latest)", version)
			}
			return nil
		},
		RunE: adminRun(o, 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
			s, err := a.GetSchema(ctx, args[0], version)
			if err != nil {
				return err
			}
			printSchema(out, s)
			return nil
		})}
	get.Flags().Int32Var(&version, "version", 0, "the version to show (0 = the latest)")

	versions := &cobra.Command{Use: "versions TOPIC", Short: "List every schema version of a topic (deletions included)",
		RunE: adminRun(o, 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
			vs, err := a.ListSchemaVersions(ctx, args[0])
			if err != nil {
				return err
			}
			if out.json {
				out.message(&clientv1.ListSchemaVersionsResponse{Versions: vs})
				return nil
			}
			for _, s := range vs {
				if s.GetDeleted() {
					fmt.Fprintf(out.w, "%d deleted\n", s.GetVersion())
					continue
				}
				fmt.Fprintf(out.w, "%d %s %s\n", s.GetVersion(), schemacompat.TypeName(s.GetType()), time.UnixMilli(s.GetCreatedMs()).UTC().Format(time.RFC3339))
			}
			return nil
		})}

	var force bool
	del := &cobra.Command{Use: "delete TOPIC [--force]", Short: "Delete a topic's schema (a deletion version; --force removes every version)",
		RunE: adminRun(o, 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
			v, err := a.DeleteSchema(ctx, args[0], force)
			if err != nil {
				return err
			}
			if out.json {
				(&lineWriter{w: out.w}).json(map[string]any{"result": "ok", "action": "deleted schema of", "name": args[0], "version": v, "force": force})
				return nil
			}
			if force {
				fmt.Fprintf(out.w, "removed every schema version of %s\n", args[0])
			} else {
				fmt.Fprintf(out.w, "deleted schema of %s (deletion recorded as version %d)\n", args[0], v)
			}
			return nil
		})}
	del.Flags().BoolVar(&force, "force", false, "remove every version (entries written with them can no longer be decoded by typed consumers; numbering restarts at 1)")

	cpf := &schemaFileFlags{}
	compat := &cobra.Command{Use: "compatibility TOPIC -f FILE [--type ...]", Short: "Test whether a schema may be registered for a topic (nothing is written)",
		PreRunE: func(*cobra.Command, []string) error { return cpf.load() },
		RunE: adminRun(o, 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
			r, err := a.TestSchemaCompatibility(ctx, args[0], cpf.info)
			if err != nil {
				return err
			}
			switch {
			case out.json:
				out.message(r)
			case r.GetCompatible():
				fmt.Fprintf(out.w, "compatible with %s under %s\n", args[0], schemacompat.ModeName(r.GetCompatibility()))
			default:
				fmt.Fprintf(out.w, "incompatible with %s: %s\n", args[0], r.GetReason())
			}
			if !r.GetCompatible() {
				// Exit 1, so that a pipeline can gate on the test.
				return &exitCodeError{1, fmt.Errorf("schema incompatible with %s", args[0])}
			}
			return nil
		})}
	cpf.register(compat)

	var mode clientv1.SchemaCompatibility
	setCompat := &cobra.Command{Use: "set-compatibility TOPIC|TENANT/NS MODE",
		Short: "Set the compatibility mode of a topic or a namespace: BACKWARD, FORWARD, FULL, NONE, *_TRANSITIVE, or INHERIT (topic: use the namespace's)",
		PreRunE: func(_ *cobra.Command, args []string) error {
			if len(args) != 2 {
				return nil // adminRun reports the usage
			}
			if strings.EqualFold(args[1], "inherit") {
				mode = clientv1.SchemaCompatibility_SCHEMA_COMPATIBILITY_UNSPECIFIED
				return nil
			}
			m, err := schemacompat.ParseMode(args[1])
			if err != nil {
				return fmt.Errorf("MODE %q is not one of BACKWARD, FORWARD, FULL, NONE, BACKWARD_TRANSITIVE, FORWARD_TRANSITIVE, FULL_TRANSITIVE, INHERIT", args[1])
			}
			mode = m
			return nil
		},
		RunE: adminRun(o, 2, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
			if err := a.SetSchemaCompatibility(ctx, args[0], isNamespaceArg(args[0]), mode); err != nil {
				return err
			}
			out.done("set schema compatibility "+schemacompat.ModeName(mode)+" of", args[0])
			return nil
		})}
	getCompat := &cobra.Command{Use: "get-compatibility TOPIC|TENANT/NS", Short: "Show the effective compatibility mode of a topic or a namespace",
		RunE: adminRun(o, 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
			m, src, err := a.GetSchemaCompatibility(ctx, args[0], isNamespaceArg(args[0]))
			if err != nil {
				return err
			}
			if out.json {
				(&lineWriter{w: out.w}).json(map[string]string{"name": args[0], "compatibility": schemacompat.ModeName(m), "source": src})
				return nil
			}
			fmt.Fprintf(out.w, "%s (from %s)\n", schemacompat.ModeName(m), src)
			return nil
		})}
	g.AddCommand(upload, get, versions, del, compat, setCompat, getCompat)
	return g
}
