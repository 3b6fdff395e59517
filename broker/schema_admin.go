package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/internal/schemacompat"
	"github.com/meridianmq/meridian/metadata"
	"google.golang.org/protobuf/encoding/protojson"
)

// Schema registry admin RPCs. They work on the global shard from any
// broker of any region: no topic ownership is involved. Reads go through
// the policy cache: linearizable when the global shard answers, else the
// broker's last seen copy (so typed consumers of a cut-off region keep
// fetching the versions they need); writes need the global shard.

// validateSchemaPolicies checks the namespace policy fields of the schema
// registry (NamespacePolicies 20).
func validateSchemaPolicies(p *clientv1.NamespacePolicies) error {
	if _, ok := clientv1.SchemaCompatibility_name[int32(p.GetSchemaCompatibility())]; !ok {
		return fmt.Errorf("%w: schema_compatibility %d is not UNSPECIFIED, BACKWARD, FORWARD, FULL, NONE or a _TRANSITIVE mode", ErrInvalidArgument, p.GetSchemaCompatibility())
	}
	return nil
}

// schemaTopic parses a request's topic and checks its namespace exists.
func (a *adminService) schemaTopic(ctx context.Context, topic string) (TopicName, *clientv1.NamespacePolicies, error) {
	name, err := ParseTopic(topic)
	if err != nil {
		return TopicName{}, nil, err
	}
	pol, err := a.b.getPolicies(ctx, name.NamespaceName())
	if err != nil {
		return TopicName{}, nil, err
	}
	return name, pol, nil
}

// UploadSchema registers a schema version after the compatibility check;
// an identical schema already registered answers its version.
func (a *adminService) UploadSchema(ctx context.Context, r *clientv1.UploadSchemaRequest) (*clientv1.UploadSchemaResponse, error) {
	name, pol, err := a.schemaTopic(ctx, r.GetTopic())
	if err != nil {
		return nil, GRPCError(err)
	}
	if schemacompat.IsNone(r.GetSchema()) {
		return nil, GRPCError(fmt.Errorf("%w: schema.type must be STRING, JSON or PROTOBUF (NONE and BYTES are never registered)", ErrInvalidArgument))
	}
	v, existing, err := a.b.registerSchema(ctx, name, r.GetSchema(), pol, "uploaded", true)
	if err != nil {
		return nil, GRPCError(err)
	}
	return &clientv1.UploadSchemaResponse{Version: v, Existing: existing}, nil
}

// GetSchema returns one version, or the latest (NOT_FOUND when none or
// when the latest is a tombstone).
func (a *adminService) GetSchema(ctx context.Context, r *clientv1.GetSchemaRequest) (*clientv1.GetSchemaResponse, error) {
	name, err := ParseTopic(r.GetTopic())
	if err != nil {
		return nil, GRPCError(err)
	}
	if r.GetVersion() < 0 {
		return nil, GRPCError(fmt.Errorf("%w: version %d must be >= 1 (0 = latest)", ErrInvalidArgument, r.GetVersion()))
	}
	if r.GetVersion() > 0 {
		si, err := a.b.schemaVersion(ctx, name, r.GetVersion())
		if err != nil {
			return nil, GRPCError(err)
		}
		return &clientv1.GetSchemaResponse{Schema: si}, nil
	}
	all, _, err := a.b.schemaVersions(ctx, name, true)
	if err != nil {
		return nil, GRPCError(err)
	}
	if len(all) == 0 {
		return nil, GRPCError(fmt.Errorf("%w: no schema registered for %s", ErrNotFound, name))
	}
	if last := all[len(all)-1]; !last.GetDeleted() {
		return &clientv1.GetSchemaResponse{Schema: last}, nil
	}
	return nil, GRPCError(fmt.Errorf("%w: the schema of %s was deleted (version %d)", ErrNotFound, name, all[len(all)-1].GetVersion()))
}

// ListSchemaVersions lists every version, tombstones included, oldest first.
func (a *adminService) ListSchemaVersions(ctx context.Context, r *clientv1.ListSchemaVersionsRequest) (*clientv1.ListSchemaVersionsResponse, error) {
	name, err := ParseTopic(r.GetTopic())
	if err != nil {
		return nil, GRPCError(err)
	}
	all, _, err := a.b.schemaVersions(ctx, name, true)
	if err != nil {
		return nil, GRPCError(err)
	}
	return &clientv1.ListSchemaVersionsResponse{Versions: all}, nil
}

// DeleteSchema appends a tombstone version (or, with force, removes every
// version and the topic's compatibility mode).
func (a *adminService) DeleteSchema(ctx context.Context, r *clientv1.DeleteSchemaRequest) (*clientv1.DeleteSchemaResponse, error) {
	name, err := ParseTopic(r.GetTopic())
	if err != nil {
		return nil, GRPCError(err)
	}
	for attempt := 0; ; attempt++ {
		all, _, err := a.b.schemaVersions(ctx, name, true)
		if err != nil {
			return nil, GRPCError(err)
		}
		if len(all) == 0 || (!r.GetForce() && all[len(all)-1].GetDeleted()) {
			return nil, GRPCError(fmt.Errorf("%w: no schema registered for %s", ErrNotFound, name))
		}
		if r.GetForce() {
			for _, si := range all {
				if err := a.b.cfg.Global.Delete(ctx, schemaKey(name, si.GetVersion()), metadata.AnyVersion); err != nil && !errors.Is(err, metadata.ErrNotFound) {
					return nil, GRPCError(fmt.Errorf("%w: delete schema version %d of %s: %v", ErrUnavailable, si.GetVersion(), name, err))
				}
				a.b.policies.forget(schemaKey(name, si.GetVersion()))
			}
			a.b.log.Info("schema registry removed", "topic", name.String(), "versions", len(all))
			return &clientv1.DeleteSchemaResponse{}, nil
		}
		tomb := &clientv1.SchemaInfo{Version: all[len(all)-1].GetVersion() + 1, CreatedMs: time.Now().UnixMilli(), Deleted: true}
		if err := a.b.putSchemaVersion(ctx, name, tomb); err != nil {
			if errors.Is(err, metadata.ErrVersionMismatch) && attempt < 10 {
				continue
			}
			return nil, GRPCError(err)
		}
		a.b.log.Info("schema deleted", "topic", name.String(), "tombstone_version", tomb.GetVersion())
		return &clientv1.DeleteSchemaResponse{Version: tomb.GetVersion()}, nil
	}
}

// TestSchemaCompatibility checks a schema against the registry without
// registering it.
func (a *adminService) TestSchemaCompatibility(ctx context.Context, r *clientv1.TestSchemaCompatibilityRequest) (*clientv1.TestSchemaCompatibilityResponse, error) {
	name, pol, err := a.schemaTopic(ctx, r.GetTopic())
	if err != nil {
		return nil, GRPCError(err)
	}
	if err := validateSchema(r.GetSchema()); err != nil {
		return nil, GRPCError(err)
	}
	mode, _, _, err := a.b.schemaMode(ctx, name, pol)
	if err != nil {
		return nil, GRPCError(err)
	}
	all, _, err := a.b.schemaVersions(ctx, name, true)
	if err != nil {
		return nil, GRPCError(err)
	}
	resp := &clientv1.TestSchemaCompatibilityResponse{Compatible: true, Compatibility: mode}
	if err := schemacompat.Check(mode, r.GetSchema(), liveHistory(all)); err != nil {
		resp.Compatible, resp.Reason = false, err.Error()
	}
	return resp, nil
}

// SetSchemaCompatibility sets a topic's mode (UNSPECIFIED removes it) or a
// namespace's (NamespacePolicies.schema_compatibility).
func (a *adminService) SetSchemaCompatibility(ctx context.Context, r *clientv1.SetSchemaCompatibilityRequest) (*clientv1.SetSchemaCompatibilityResponse, error) {
	mode := r.GetCompatibility()
	if _, ok := clientv1.SchemaCompatibility_name[int32(mode)]; !ok {
		return nil, GRPCError(fmt.Errorf("%w: compatibility %d is not a SchemaCompatibility", ErrInvalidArgument, mode))
	}
	if (r.GetTopic() == "") == (r.GetNamespace() == "") {
		return nil, GRPCError(fmt.Errorf("%w: exactly one of topic and namespace must be set", ErrInvalidArgument))
	}
	if ns := r.GetNamespace(); ns != "" {
		if _, _, err := ParseNamespace(ns); err != nil {
			return nil, GRPCError(err)
		}
		kv, err := a.b.cfg.Global.Get(ctx, namespacePrefix+ns, metadata.ReadOptions{})
		if errors.Is(err, metadata.ErrNotFound) {
			return nil, GRPCError(fmt.Errorf("%w: namespace %s does not exist", ErrNotFound, ns))
		}
		if err != nil {
			return nil, GRPCError(fmt.Errorf("%w: %v", ErrUnavailable, err))
		}
		p, err := parsePolicies(ns, kv.Value)
		if err != nil {
			return nil, GRPCError(err)
		}
		p.SchemaCompatibility = mode
		if _, err := a.SetNamespacePolicies(ctx, &clientv1.SetNamespacePoliciesRequest{Namespace: ns, Policies: p}); err != nil {
			return nil, err
		}
		a.b.log.Info("namespace schema compatibility set", "namespace", ns, "compatibility", schemacompat.ModeName(mode))
		return &clientv1.SetSchemaCompatibilityResponse{}, nil
	}
	name, _, err := a.schemaTopic(ctx, r.GetTopic())
	if err != nil {
		return nil, GRPCError(err)
	}
	key := schemaCompatPrefix + schemaRegistryTopic(name).String()
	if mode == clientv1.SchemaCompatibility_SCHEMA_COMPATIBILITY_UNSPECIFIED {
		if err := a.b.cfg.Global.Delete(ctx, key, metadata.AnyVersion); err != nil && !errors.Is(err, metadata.ErrNotFound) {
			return nil, GRPCError(fmt.Errorf("%w: remove schema compatibility of %s: %v", ErrUnavailable, name, err))
		}
		a.b.policies.forget(key)
		return &clientv1.SetSchemaCompatibilityResponse{}, nil
	}
	val, _ := json.Marshal(schemaCompatRecord{Compatibility: schemacompat.ModeName(mode)})
	kv, err := a.b.cfg.Global.Put(ctx, key, val, metadata.AnyVersion, 0)
	if err != nil {
		return nil, GRPCError(fmt.Errorf("%w: write schema compatibility of %s: %v", ErrUnavailable, name, err))
	}
	a.b.policies.learn(kv)
	a.b.log.Info("topic schema compatibility set", "topic", name.String(), "compatibility", schemacompat.ModeName(mode))
	return &clientv1.SetSchemaCompatibilityResponse{}, nil
}

// GetSchemaCompatibility returns the effective mode of a topic or a
// namespace and where it comes from.
func (a *adminService) GetSchemaCompatibility(ctx context.Context, r *clientv1.GetSchemaCompatibilityRequest) (*clientv1.GetSchemaCompatibilityResponse, error) {
	if (r.GetTopic() == "") == (r.GetNamespace() == "") {
		return nil, GRPCError(fmt.Errorf("%w: exactly one of topic and namespace must be set", ErrInvalidArgument))
	}
	if ns := r.GetNamespace(); ns != "" {
		if _, _, err := ParseNamespace(ns); err != nil {
			return nil, GRPCError(err)
		}
		kv, err := a.b.cfg.Global.Get(ctx, namespacePrefix+ns, metadata.ReadOptions{})
		if errors.Is(err, metadata.ErrNotFound) {
			return nil, GRPCError(fmt.Errorf("%w: namespace %s does not exist", ErrNotFound, ns))
		}
		if err != nil {
			return nil, GRPCError(fmt.Errorf("%w: %v", ErrUnavailable, err))
		}
		p := &clientv1.NamespacePolicies{}
		if err := protojson.Unmarshal(kv.Value, p); err != nil {
			return nil, GRPCError(fmt.Errorf("broker: namespace %s policies corrupt: %v", ns, err))
		}
		if m := p.GetSchemaCompatibility(); m != clientv1.SchemaCompatibility_SCHEMA_COMPATIBILITY_UNSPECIFIED {
			return &clientv1.GetSchemaCompatibilityResponse{Compatibility: m, Source: "namespace"}, nil
		}
		return &clientv1.GetSchemaCompatibilityResponse{Compatibility: clientv1.SchemaCompatibility_SCHEMA_COMPATIBILITY_BACKWARD, Source: "default"}, nil
	}
	name, pol, err := a.schemaTopic(ctx, r.GetTopic())
	if err != nil {
		return nil, GRPCError(err)
	}
	mode, src, _, err := a.b.schemaMode(ctx, name, pol)
	if err != nil {
		return nil, GRPCError(err)
	}
	return &clientv1.GetSchemaCompatibilityResponse{Compatibility: mode, Source: src}, nil
}
