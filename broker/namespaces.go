package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Key prefixes in the global shard.
const (
	// tenantPrefix + tenant holds tenantRecord (JSON).
	tenantPrefix = "tenants/"
	// namespacePrefix + "tenant/namespace" holds NamespacePolicies (protojson).
	namespacePrefix = "namespaces/"
)

// Defaults created by standalone.
const (
	DefaultTenant    = "public"
	DefaultNamespace = "public/default"
)

type tenantRecord struct {
	AllowedRegions []string `json:"allowed_regions,omitempty"`
	// AdminRoles may do every admin operation inside the tenant
	// (permissions.go).
	AdminRoles []string `json:"admin_roles,omitempty"`
}

// Policy limits.
const (
	// MaxReplicationRegions caps a namespace's replication regions.
	MaxReplicationRegions = 32
)

// getPolicies returns a namespace's policies through the policy cache: a
// region cut off from the global shard keeps the policies it last saw.
// The result is shared: do not modify it.
func (s *Server) getPolicies(ctx context.Context, ns string) (*clientv1.NamespacePolicies, error) {
	kv, err := s.policies.get(ctx, namespacePrefix+ns, false)
	if errors.Is(err, metadata.ErrNotFound) {
		return nil, fmt.Errorf("%w: namespace %s does not exist", ErrNotFound, ns)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: read namespace %s: %v", ErrUnavailable, ns, err)
	}
	return parsePolicies(ns, kv.Value)
}

func parsePolicies(ns string, val []byte) (*clientv1.NamespacePolicies, error) {
	p := &clientv1.NamespacePolicies{}
	if err := protojson.Unmarshal(val, p); err != nil {
		return nil, fmt.Errorf("broker: namespace %s policies corrupt: %v", ns, err)
	}
	return p, nil
}

// getTenant returns a tenant's record through the policy cache.
func (s *Server) getTenant(ctx context.Context, tenant string) (tenantRecord, error) {
	kv, err := s.policies.get(ctx, tenantPrefix+tenant, false)
	if errors.Is(err, metadata.ErrNotFound) {
		return tenantRecord{}, fmt.Errorf("%w: tenant %s does not exist", ErrNotFound, tenant)
	}
	if err != nil {
		return tenantRecord{}, fmt.Errorf("%w: read tenant %s: %v", ErrUnavailable, tenant, err)
	}
	return parseTenant(tenant, kv.Value)
}

func parseTenant(tenant string, val []byte) (tenantRecord, error) {
	var rec tenantRecord
	if err := json.Unmarshal(val, &rec); err != nil {
		return tenantRecord{}, fmt.Errorf("broker: tenant %s record corrupt: %v", tenant, err)
	}
	return rec, nil
}

// quorums resolves E/Qw/Qa from policies and broker defaults.
func (s *Server) quorums(p *clientv1.NamespacePolicies) (e, w, a int) {
	e, w, a = s.cfg.DefaultEnsembleSize, s.cfg.DefaultWriteQuorum, s.cfg.DefaultAckQuorum
	if v := int(p.GetEnsembleSize()); v > 0 {
		e = v
	}
	if v := int(p.GetWriteQuorum()); v > 0 {
		w = v
	}
	if v := int(p.GetAckQuorum()); v > 0 {
		a = v
	}
	return
}

// validatePolicies checks every field; the error names field and limit.
func (s *Server) validatePolicies(p *clientv1.NamespacePolicies) error {
	if p == nil {
		return nil
	}
	if p.RetentionTimeSeconds < -1 {
		return fmt.Errorf("%w: retention_time_seconds %d must be -1 (forever) or >= 0", ErrInvalidArgument, p.RetentionTimeSeconds)
	}
	if p.RetentionSizeBytes < -1 {
		return fmt.Errorf("%w: retention_size_bytes %d must be -1 (unlimited) or >= 0", ErrInvalidArgument, p.RetentionSizeBytes)
	}
	for _, f := range []struct {
		n string
		v int32
	}{{"ensemble_size", p.EnsembleSize}, {"write_quorum", p.WriteQuorum}, {"ack_quorum", p.AckQuorum}} {
		if f.v < 0 || f.v > 64 {
			return fmt.Errorf("%w: %s %d must be in [0 (default), 64]", ErrInvalidArgument, f.n, f.v)
		}
	}
	e, w, a := s.quorums(p)
	if err := validateQuorum(e, w, a); err != nil {
		return err
	}
	if err := validateCursorPersistInterval(p); err != nil {
		return err
	}
	if err := validateBacklogQuota(p); err != nil {
		return err
	}
	if err := validateLimitPolicies(p); err != nil { // limits.go
		return err
	}
	if err := validateSchemaPolicies(p); err != nil { // schema_admin.go
		return err
	}
	if err := s.validatePermissions(p); err != nil {
		return err
	}
	if len(p.ReplicationRegions) > MaxReplicationRegions {
		return fmt.Errorf("%w: replication_regions has %d entries, limit %d", ErrInvalidArgument, len(p.ReplicationRegions), MaxReplicationRegions)
	}
	for i, r := range p.ReplicationRegions {
		if err := ValidateName(fmt.Sprintf("replication_regions[%d]", i), r); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) createTenant(ctx context.Context, name string, regions, adminRoles []string) error {
	if err := ValidateName("tenant", name); err != nil {
		return err
	}
	if err := validateRoles("admin_roles", adminRoles, s.maxGrants()); err != nil {
		return err
	}
	for i, r := range regions {
		if err := ValidateName(fmt.Sprintf("allowed_regions[%d]", i), r); err != nil {
			return err
		}
	}
	val, _ := json.Marshal(tenantRecord{AllowedRegions: regions, AdminRoles: adminRoles})
	kv, err := s.cfg.Global.Put(ctx, tenantPrefix+name, val, metadata.MustNotExist, 0)
	if err != nil {
		if errors.Is(err, metadata.ErrVersionMismatch) {
			return fmt.Errorf("%w: tenant %s", ErrAlreadyExists, name)
		}
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	s.policies.learn(kv)
	return nil
}

func (s *Server) createNamespace(ctx context.Context, ns string, p *clientv1.NamespacePolicies) error {
	tenant, _, err := ParseNamespace(ns)
	if err != nil {
		return err
	}
	if err := s.validatePolicies(p); err != nil {
		return err
	}
	if _, err := s.cfg.Global.Get(ctx, tenantPrefix+tenant, metadata.ReadOptions{}); err != nil {
		if errors.Is(err, metadata.ErrNotFound) {
			return fmt.Errorf("%w: tenant %s does not exist", ErrNotFound, tenant)
		}
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if err := s.checkRegionsAllowed(ctx, ns, "replication_regions", p.GetReplicationRegions()); err != nil {
		return err
	}
	if p == nil {
		p = &clientv1.NamespacePolicies{}
	}
	if p.GetRetentionTimeSeconds() == 0 && p.GetRetentionSizeBytes() == 0 {
		p = proto.Clone(p).(*clientv1.NamespacePolicies)
		p.RetentionTimeSeconds = int64(s.cfg.DefaultRetentionTime / time.Second)
		if s.cfg.DefaultRetentionTime < 0 {
			p.RetentionTimeSeconds = -1
		}
		p.RetentionSizeBytes = s.cfg.DefaultRetentionSizeBytes
	}
	if p.BacklogQuotaBytes == nil && s.cfg.DefaultBacklogQuotaBytes >= 0 {
		p = proto.Clone(p).(*clientv1.NamespacePolicies)
		p.BacklogQuotaBytes = proto.Int64(s.cfg.DefaultBacklogQuotaBytes)
	}
	val, _ := protojson.Marshal(p)
	kv, err := s.cfg.Global.Put(ctx, namespacePrefix+ns, val, metadata.MustNotExist, 0)
	if err != nil {
		if errors.Is(err, metadata.ErrVersionMismatch) {
			return fmt.Errorf("%w: namespace %s", ErrAlreadyExists, ns)
		}
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	s.policies.learn(kv)
	return nil
}

// EnsureDefaultNamespace creates tenant "public" and namespace
// "public/default" if they are missing (standalone does this at start).
// It needs only the metadata stores and may be called before Start.
func (s *Server) EnsureDefaultNamespace(ctx context.Context) error {
	if err := s.createTenant(ctx, DefaultTenant, nil, nil); err != nil && !errors.Is(err, ErrAlreadyExists) {
		return err
	}
	if err := s.createNamespace(ctx, DefaultNamespace, nil); err != nil && !errors.Is(err, ErrAlreadyExists) {
		return err
	}
	return nil
}

// listTopicKeys lists the topics of a namespace from the managed ledger
// keys under prefix ("managed-ledgers/tenant/ns/"): every key below it is
// one topic, hierarchical names included ("video/uploaded/v1").
func listTopicKeys(ctx context.Context, store metadata.Store, prefix string) ([]string, error) {
	var out []string
	page := metadata.Page{}
	for {
		res, err := store.List(ctx, prefix, page, metadata.ReadOptions{})
		if err != nil {
			return nil, fmt.Errorf("%w: list %s: %v", ErrUnavailable, prefix, err)
		}
		for _, kv := range res.KVs {
			out = append(out, kv.Key[len(prefix):])
		}
		if !res.More || len(res.KVs) == 0 {
			return out, nil
		}
		page.After = res.KVs[len(res.KVs)-1].Key
	}
}

// listKeys lists the child names directly under prefix in store.
func listKeys(ctx context.Context, store metadata.Store, prefix string) ([]string, error) {
	var out []string
	page := metadata.Page{}
	for {
		res, err := store.List(ctx, prefix, page, metadata.ReadOptions{})
		if err != nil {
			return nil, fmt.Errorf("%w: list %s: %v", ErrUnavailable, prefix, err)
		}
		for _, kv := range res.KVs {
			rest := kv.Key[len(prefix):]
			if !strings.Contains(rest, "/") {
				out = append(out, rest)
			}
		}
		if !res.More || len(res.KVs) == 0 {
			return out, nil
		}
		page.After = res.KVs[len(res.KVs)-1].Key
	}
}
