package client

import (
	"context"
	"fmt"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// SchemaCompatibility is a schema compatibility mode (BACKWARD, FORWARD,
// FULL, NONE and the _TRANSITIVE variants).
type SchemaCompatibility = clientv1.SchemaCompatibility

// SchemaCompatibilityResult is the answer of TestSchemaCompatibility.
type SchemaCompatibilityResult = clientv1.TestSchemaCompatibilityResponse

// UploadSchema registers schema for topic after the compatibility check and
// returns its version; existing is true when an identical schema was
// already registered (its version is returned, nothing is written).
func (a *Admin) UploadSchema(ctx context.Context, topic string, schema *SchemaInfo) (version int32, existing bool, err error) {
	var r *clientv1.UploadSchemaResponse
	err = write(ctx, a, "upload schema of "+topic, func(ctx context.Context) error {
		var err error
		r, err = a.api.UploadSchema(ctx, &clientv1.UploadSchemaRequest{Topic: topic, Schema: schema})
		return err
	})
	if err != nil {
		return 0, false, schemaRefusal(err)
	}
	return r.GetVersion(), r.GetExisting(), nil
}

// GetSchema returns one version of topic's schema (version 0 = the latest).
func (a *Admin) GetSchema(ctx context.Context, topic string, version int32) (*SchemaInfo, error) {
	r, err := read(ctx, a, fmt.Sprintf("get schema version %d of %s", version, topic), func(ctx context.Context) (*clientv1.GetSchemaResponse, error) {
		return a.api.GetSchema(ctx, &clientv1.GetSchemaRequest{Topic: topic, Version: version})
	})
	return r.GetSchema(), err
}

// ListSchemaVersions lists every version of topic's schema, oldest first
// (deletions appear as versions with Deleted set).
func (a *Admin) ListSchemaVersions(ctx context.Context, topic string) ([]*SchemaInfo, error) {
	r, err := read(ctx, a, "list schema versions of "+topic, func(ctx context.Context) (*clientv1.ListSchemaVersionsResponse, error) {
		return a.api.ListSchemaVersions(ctx, &clientv1.ListSchemaVersionsRequest{Topic: topic})
	})
	return r.GetVersions(), err
}

// DeleteSchema deletes topic's schema: a tombstone version (earlier
// versions stay readable), or with force every version.
func (a *Admin) DeleteSchema(ctx context.Context, topic string, force bool) (int32, error) {
	var r *clientv1.DeleteSchemaResponse
	err := write(ctx, a, "delete schema of "+topic, func(ctx context.Context) error {
		var err error
		r, err = a.api.DeleteSchema(ctx, &clientv1.DeleteSchemaRequest{Topic: topic, Force: force})
		return err
	})
	return r.GetVersion(), err
}

// TestSchemaCompatibility checks schema against topic's registry without
// registering it.
func (a *Admin) TestSchemaCompatibility(ctx context.Context, topic string, schema *SchemaInfo) (*SchemaCompatibilityResult, error) {
	r, err := read(ctx, a, "test schema compatibility of "+topic, func(ctx context.Context) (*clientv1.TestSchemaCompatibilityResponse, error) {
		return a.api.TestSchemaCompatibility(ctx, &clientv1.TestSchemaCompatibilityRequest{Topic: topic, Schema: schema})
	})
	if err != nil {
		return nil, schemaRefusal(err)
	}
	return r, nil
}

// SetSchemaCompatibility sets the mode of a topic ("tenant/ns/topic") or,
// with namespace true, of a namespace ("tenant/ns"). UNSPECIFIED removes a
// topic's own mode.
func (a *Admin) SetSchemaCompatibility(ctx context.Context, name string, namespace bool, mode SchemaCompatibility) error {
	req := &clientv1.SetSchemaCompatibilityRequest{Compatibility: mode}
	if namespace {
		req.Namespace = name
	} else {
		req.Topic = name
	}
	return write(ctx, a, "set schema compatibility of "+name, func(ctx context.Context) error {
		_, err := a.api.SetSchemaCompatibility(ctx, req)
		return err
	})
}

// GetSchemaCompatibility returns the effective mode of a topic (or, with
// namespace true, of a namespace) and where it comes from ("topic",
// "namespace" or "default").
func (a *Admin) GetSchemaCompatibility(ctx context.Context, name string, namespace bool) (SchemaCompatibility, string, error) {
	req := &clientv1.GetSchemaCompatibilityRequest{}
	if namespace {
		req.Namespace = name
	} else {
		req.Topic = name
	}
	r, err := read(ctx, a, "get schema compatibility of "+name, func(ctx context.Context) (*clientv1.GetSchemaCompatibilityResponse, error) {
		return a.api.GetSchemaCompatibility(ctx, req)
	})
	return r.GetCompatibility(), r.GetSource(), err
}
