package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/internal/schemacompat"
	"github.com/meridianmq/meridian/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Schema registry (issue 10, part schemas).
//
// Every topic has a registry of schema versions in the GLOBAL shard, so
// every region sees the same versions and a replicated entry's
// schema_version means the same schema everywhere:
//
//	schemas/<tenant>/<ns>/<topic>/<20-digit version>  SchemaInfo (protojson)
//	schema-compat/<tenant>/<ns>/<topic>              {"compatibility": "..."}
//
// Versions start at 1 and are written with MustNotExist, so two brokers
// registering at once never both get the same number (the loser re-reads
// and tries again). A version is never rewritten; DeleteSchema appends a
// tombstone version (deleted = true) so numbers never restart and entries
// of older versions stay decodable.
//
// Reads go through the policy cache, which mirrors both prefixes: a region
// cut off from the global shard keeps opening producers and consumers whose
// schema is registered, and serving versions to typed consumers; only a
// new version needs the global shard (see registerSchema).

const (
	schemaPrefix       = "schemas/"
	schemaCompatPrefix = "schema-compat/"
	// MaxSchemaVersions caps the versions (tombstones included) a topic's
	// registry keeps.
	MaxSchemaVersions   = 1000
	schemaVersionDigits = 20
)

// ErrIncompatibleSchema: a schema breaks the topic's compatibility mode, or
// is not registered and may not be. It is a kind of ErrNotAllowed
// (ERROR_CODE_NOT_ALLOWED on the wire).
var ErrIncompatibleSchema = fmt.Errorf("%w: schema incompatible", ErrNotAllowed)

// schemaRegistryTopic is the topic whose registry name uses: the partitions
// of a partitioned topic ("<topic>-partition-<i>") share the registry of
// the partitioned topic, as in Pulsar.
func schemaRegistryTopic(name TopicName) TopicName {
	if i := strings.LastIndex(name.Topic, schemaPartitionSuffix); i > 0 {
		digits := name.Topic[i+len(schemaPartitionSuffix):]
		if _, err := strconv.ParseUint(digits, 10, 31); err == nil && digits != "" && (digits == "0" || digits[0] != '0') {
			name.Topic = name.Topic[:i]
		}
	}
	return name
}

// schemaPartitionSuffix separates a partitioned topic's name from a partition
// index ("<topic>-partition-<i>").
const schemaPartitionSuffix = "-partition-"

func schemaKeyPrefix(name TopicName) string {
	return schemaPrefix + schemaRegistryTopic(name).String() + "/"
}

func schemaKey(name TopicName, v int32) string {
	return fmt.Sprintf("%s%0*d", schemaKeyPrefix(name), schemaVersionDigits, v)
}

// schemaVersions lists a topic's registry, oldest first, through the
// policy cache. fresh=false (the data path: producer and consumer opens)
// answers from the broker's mirror of the global shard, so a region cut
// off from it keeps finding the schemas it last saw; fresh=true (admin
// reads, and the registration path once the mirror missed) lists the
// global shard linearizably and falls back to the mirror (stale = true)
// when the shard cannot answer within policyFreshTimeout. Keys of deeper
// topics (schemas/<topic>/<sub>/...) are skipped: only a suffix of exactly
// 20 digits is a version of this topic.
func (s *Server) schemaVersions(ctx context.Context, name TopicName, fresh bool) (all []*clientv1.SchemaInfo, stale bool, err error) {
	prefix := schemaKeyPrefix(name)
	var kvs []metadata.KV
	if fresh {
		kvs, stale, err = s.policies.listFresh(ctx, prefix)
		if err == nil && !stale {
			for _, kv := range kvs {
				s.policies.learn(kv)
			}
		}
	} else {
		kvs, err = s.policies.children(ctx, prefix)
	}
	if err != nil {
		return nil, false, fmt.Errorf("%w: list schema versions of %s: %v", ErrUnavailable, name, err)
	}
	for _, kv := range kvs {
		rest := strings.TrimPrefix(kv.Key, prefix)
		if len(rest) != schemaVersionDigits {
			continue
		}
		if _, err := strconv.ParseUint(rest, 10, 64); err != nil {
			continue
		}
		si := &clientv1.SchemaInfo{}
		if err := protojson.Unmarshal(kv.Value, si); err != nil {
			return nil, false, fmt.Errorf("broker: schema %s corrupt: %v", kv.Key, err)
		}
		all = append(all, si)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].GetVersion() < all[j].GetVersion() })
	return all, stale, nil
}

// liveHistory returns the versions registered since the last tombstone.
func liveHistory(all []*clientv1.SchemaInfo) []*clientv1.SchemaInfo {
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].GetDeleted() {
			return all[i+1:]
		}
	}
	return all
}

// schemaVersion reads one version (deleted ones included) through the
// policy cache: a version is never rewritten, so the mirror's copy is
// served even when the global shard is unreachable (typed consumers fetch
// the versions of the entries they read); a miss reads the store, since a
// version registered a moment ago elsewhere may not have reached the
// mirror yet.
func (s *Server) schemaVersion(ctx context.Context, name TopicName, v int32) (*clientv1.SchemaInfo, error) {
	kv, err := s.policies.get(ctx, schemaKey(name, v), false)
	if errors.Is(err, metadata.ErrNotFound) {
		return nil, fmt.Errorf("%w: no schema version %d registered for %s", ErrNotFound, v, name)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: read schema version %d of %s: %v", ErrUnavailable, v, name, err)
	}
	si := &clientv1.SchemaInfo{}
	if err := protojson.Unmarshal(kv.Value, si); err != nil {
		return nil, fmt.Errorf("broker: schema %s corrupt: %v", kv.Key, err)
	}
	return si, nil
}

// schemaCompatRecord is a topic's own compatibility mode.
type schemaCompatRecord struct {
	Compatibility string `json:"compatibility"`
}

// schemaMode returns the effective compatibility mode of a topic (its own
// record, else the namespace policy, else BACKWARD), where it comes from,
// and whether producers may register new versions (schema_auto_update).
// The topic's record is read through the policy cache; its absence (the
// common case) is trusted once the prefix was listed, like a topic
// override's.
func (s *Server) schemaMode(ctx context.Context, name TopicName, pol *clientv1.NamespacePolicies) (clientv1.SchemaCompatibility, string, bool, error) {
	if pol == nil {
		p, err := s.getPolicies(ctx, name.NamespaceName())
		if err != nil {
			return 0, "", false, err
		}
		pol = p
	}
	auto := pol.SchemaAutoUpdate == nil || pol.GetSchemaAutoUpdate()
	kv, err := s.policies.get(ctx, schemaCompatPrefix+schemaRegistryTopic(name).String(), true)
	switch {
	case err == nil:
		var rec schemaCompatRecord
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			return 0, "", false, fmt.Errorf("broker: schema compatibility of %s corrupt: %v", name, err)
		}
		m, err := schemacompat.ParseMode(rec.Compatibility)
		if err != nil {
			return 0, "", false, fmt.Errorf("broker: schema compatibility of %s corrupt: %v", name, err)
		}
		return m, "topic", auto, nil
	case !errors.Is(err, metadata.ErrNotFound):
		return 0, "", false, fmt.Errorf("%w: read schema compatibility of %s: %v", ErrUnavailable, name, err)
	}
	if m := pol.GetSchemaCompatibility(); m != clientv1.SchemaCompatibility_SCHEMA_COMPATIBILITY_UNSPECIFIED {
		return m, "namespace", auto, nil
	}
	return clientv1.SchemaCompatibility_SCHEMA_COMPATIBILITY_BACKWARD, "default", auto, nil
}

// validateSchema maps schemacompat's errors to the broker's.
func validateSchema(si *clientv1.SchemaInfo) error {
	if err := schemacompat.Validate(si); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	return nil
}

// registerSchema finds si in the topic's live history or registers it as
// the next version after the compatibility check. register=false (a
// consumer, or auto-update off) only checks: a schema that is not already
// registered is refused (allowNew=false) or accepted with version 0.
//
// The live history is read from the policy cache's mirror first, so a
// schema already registered is found without the global shard: a region
// cut off from it keeps opening producers and consumers. On a miss the
// global shard is listed linearizably (the schema may have been registered
// a moment ago elsewhere); registering a new version needs it (a
// create-if-absent write, so a number is never given twice), and when it
// is unreachable the open fails with ErrUnavailable (retryable) saying so.
func (s *Server) registerSchema(ctx context.Context, name TopicName, si *clientv1.SchemaInfo, pol *clientv1.NamespacePolicies, who string, register bool) (version int32, existing bool, err error) {
	if err := validateSchema(si); err != nil {
		return 0, false, err
	}
	cached, _, err := s.schemaVersions(ctx, name, false)
	if err != nil {
		return 0, false, err
	}
	if v := findLiveSchema(cached, si); v > 0 {
		return v, true, nil
	}
	for attempt := 0; ; attempt++ {
		all, stale, err := s.schemaVersions(ctx, name, true)
		if err != nil {
			return 0, false, err
		}
		if v := findLiveSchema(all, si); v > 0 {
			return v, true, nil
		}
		live := liveHistory(all)
		mode, _, auto, err := s.schemaMode(ctx, name, pol)
		if err != nil {
			return 0, false, err
		}
		if err := schemacompat.Check(mode, si, live); err != nil {
			return 0, false, fmt.Errorf("%w: %s schema for %s %s", ErrIncompatibleSchema, who, name, strings.TrimPrefix(err.Error(), schemacompat.ErrIncompatible.Error()+" "))
		}
		if !register {
			return 0, false, nil
		}
		if !auto && who == "producer" {
			return 0, false, fmt.Errorf("%w: producer schema for %s is not registered and the namespace's schema_auto_update is false (upload it with `meridian admin schemas upload`)", ErrIncompatibleSchema, name)
		}
		if stale {
			// all is the mirror's copy: the global shard did not answer.
			return 0, false, newSchemaUnreachable(who, name, "its registry could not be listed")
		}
		if len(all) >= MaxSchemaVersions {
			return 0, false, fmt.Errorf("%w: topic %s has %d schema versions, limit %d", ErrNotAllowed, name, len(all), MaxSchemaVersions)
		}
		next := int32(1)
		if len(all) > 0 {
			next = all[len(all)-1].GetVersion() + 1
		}
		rec := proto.Clone(si).(*clientv1.SchemaInfo)
		rec.Version, rec.CreatedMs, rec.Deleted = next, time.Now().UnixMilli(), false
		if err := s.putSchemaVersion(ctx, name, rec); err != nil {
			if errors.Is(err, metadata.ErrVersionMismatch) && attempt < 10 {
				continue // another broker registered this number first
			}
			if errors.Is(err, ErrUnavailable) {
				return 0, false, newSchemaUnreachable(who, name, err.Error())
			}
			return 0, false, err
		}
		s.log.Info("schema version registered", "topic", name.String(), "version", next, "type", schemacompat.TypeName(si.GetType()), "by", who, "compatibility", schemacompat.ModeName(mode))
		return next, false, nil
	}
}

// findLiveSchema returns the version of si in all's live history, newest
// first, or 0.
func findLiveSchema(all []*clientv1.SchemaInfo, si *clientv1.SchemaInfo) int32 {
	live := liveHistory(all)
	for i := len(live) - 1; i >= 0; i-- {
		if schemacompat.Same(live[i], si) {
			return live[i].GetVersion()
		}
	}
	return 0
}

// newSchemaUnreachable is the error of a new schema version that cannot be
// registered because the global metadata shard is unreachable (a region
// cut off from it): retryable, as the shard comes back.
func newSchemaUnreachable(who string, name TopicName, cause string) error {
	return fmt.Errorf("%w: %s schema for %s is new (not registered yet) and the global metadata shard, where new schema versions are registered, is unreachable; schemas already registered still work; retry once the global metadata is reachable: %v", ErrUnavailable, who, name, cause)
}

// putSchemaVersion writes a version create-if-absent (ErrVersionMismatch
// when the number was taken) and adds it to the policy cache's mirror.
func (s *Server) putSchemaVersion(ctx context.Context, name TopicName, rec *clientv1.SchemaInfo) error {
	val, err := protojson.Marshal(rec)
	if err != nil {
		return fmt.Errorf("broker: encode schema: %v", err)
	}
	kv, err := s.cfg.Global.Put(ctx, schemaKey(name, rec.GetVersion()), val, metadata.MustNotExist, 0)
	if err != nil {
		if errors.Is(err, metadata.ErrVersionMismatch) {
			return err
		}
		return fmt.Errorf("%w: write schema version %d of %s: %v", ErrUnavailable, rec.GetVersion(), name, err)
	}
	s.policies.learn(kv)
	return nil
}

// producerSchema is the producer-open hook: the registry version of the
// producer's schema (0 for none), registering it when new and compatible.
func (s *Server) producerSchema(ctx context.Context, t *topic, si *clientv1.SchemaInfo) (int32, error) {
	if schemacompat.IsNone(si) {
		return 0, nil
	}
	v, _, err := s.registerSchema(ctx, t.name, si, t.currentPolicies(), "producer", true)
	return v, err
}

// consumerSchema is the subscribe hook: a consumer's schema must be
// registered or readable under the mode (it is never registered). It
// returns the identical registered version, or 0.
func (s *Server) consumerSchema(ctx context.Context, t *topic, si *clientv1.SchemaInfo) (int32, error) {
	if schemacompat.IsNone(si) {
		return 0, nil
	}
	v, _, err := s.registerSchema(ctx, t.name, si, t.currentPolicies(), "consumer", false)
	return v, err
}

// entrySchemaVersion is the schema version stamped on a producer's entry:
// the version registered at open; a producer without a schema writes 0.
func (p *producer) entrySchemaVersion() int32 { return p.schemaVersion }
