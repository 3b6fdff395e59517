package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/metadata"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Partitioned topics (issue 10).
//
// A partitioned topic is a name with a partition count in the global
// shard (partitionedPrefix + "tenant/ns/topic" = {"partitions": N}); its
// partitions are ordinary topics named "<topic>-partition-<i>", i in
// 0..N-1, created on first use like any topic. The broker knows nothing
// else about them: clients ask GetPartitions and open one producer or
// consumer per partition, and the admin calls below create, raise, read
// and delete the record and aggregate the partitions' stats. The record
// is global, so every region's policy cache sees it (and a region cut off
// from the global shard keeps answering with the count it last saw); the
// partitions replicate one by one like any topic of the namespace.

// partitionedPrefix + "tenant/namespace/topic" holds a partitioned topic's
// record (partitionedRecord, JSON) in the global shard.
const partitionedPrefix = "partitioned-topics/"

// MaxPartitions caps a partitioned topic's partition count: every
// partition costs a producer and a consumer stream per client.
const MaxPartitions = 1024

// PartitionSuffix separates a partitioned topic's name from a partition's
// index: partition i of "t/ns/x" is "t/ns/x-partition-i" (Pulsar's form).
const PartitionSuffix = "-partition-"

// partitionedRecord is a partitioned topic's record in the global shard.
type partitionedRecord struct {
	Partitions int32 `json:"partitions"`
}

// PartitionName returns the name of partition i of topic base.
func PartitionName(base string, i int) string {
	return base + PartitionSuffix + strconv.Itoa(i)
}

// isPartitionName reports whether a topic part names a partition
// ("x-partition-3").
func isPartitionName(topicPart string) bool {
	i := strings.LastIndex(topicPart, PartitionSuffix)
	if i <= 0 {
		return false
	}
	digits := topicPart[i+len(PartitionSuffix):]
	if digits == "" {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// partitionCount returns a topic's partition count through the policy
// cache (0: not partitioned). A miss is trusted once the prefix was
// listed, so the common case (a plain topic) costs no global round trip.
func (s *Server) partitionCount(ctx context.Context, name TopicName) (int32, error) {
	kv, err := s.policies.get(ctx, partitionedPrefix+name.String(), true)
	if errors.Is(err, metadata.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%w: read partitions of %s: %v", ErrUnavailable, name, err)
	}
	return parsePartitioned(name, kv.Value)
}

func parsePartitioned(name TopicName, val []byte) (int32, error) {
	var rec partitionedRecord
	if err := json.Unmarshal(val, &rec); err != nil {
		return 0, fmt.Errorf("broker: partitioned topic record of %s corrupt: %v", name, err)
	}
	return rec.Partitions, nil
}

// checkPartitions validates a requested partition count.
func checkPartitions(n int32) error {
	if n < 1 || n > MaxPartitions {
		return fmt.Errorf("%w: partitions %d is out of range: want 1..%d", ErrInvalidArgument, n, MaxPartitions)
	}
	return nil
}

// parsePartitionedName validates the name of a partitioned topic: a valid
// topic, not itself a partition's name, whose last partition's name is
// valid too (the suffix must fit the name limit).
func (s *Server) parsePartitionedName(ctx context.Context, topic string, n int32) (TopicName, error) {
	name, err := ParseTopic(topic)
	if err != nil {
		return TopicName{}, err
	}
	if isPartitionName(name.Topic) {
		return TopicName{}, fmt.Errorf("%w: topic %q names a partition (it ends in %s<i>); give the partitioned topic's own name", ErrInvalidArgument, topic, PartitionSuffix)
	}
	if n > 0 {
		if _, err := ParseTopic(PartitionName(name.String(), int(n-1))); err != nil {
			return TopicName{}, fmt.Errorf("%w: topic %q is too long for %d partitions: the partition names add %q (topic limit %d bytes)", ErrInvalidArgument, topic, n, PartitionSuffix+strconv.Itoa(int(n-1)), MaxNameBytes)
		}
	}
	if _, err := s.getPolicies(ctx, name.NamespaceName()); err != nil {
		return TopicName{}, err
	}
	return name, nil
}

func (a *adminService) CreatePartitionedTopic(ctx context.Context, r *clientv1.CreatePartitionedTopicRequest) (*clientv1.PartitionedTopicMetadata, error) {
	if err := checkPartitions(r.GetPartitions()); err != nil {
		return nil, GRPCError(err)
	}
	name, err := a.b.parsePartitionedName(ctx, r.GetTopic(), r.GetPartitions())
	if err != nil {
		return nil, GRPCError(err)
	}
	// A plain topic of that name in this region would be shadowed.
	if _, err := a.b.cfg.Regional.Get(ctx, managedLedgerPrefix+name.String(), metadata.ReadOptions{}); err == nil {
		return nil, GRPCError(fmt.Errorf("%w: topic %s exists as a non-partitioned topic", ErrAlreadyExists, name))
	} else if !errors.Is(err, metadata.ErrNotFound) {
		return nil, GRPCError(fmt.Errorf("%w: read topic %s: %v", ErrUnavailable, name, err))
	}
	val, _ := json.Marshal(partitionedRecord{Partitions: r.GetPartitions()})
	kv, err := a.b.cfg.Global.Put(ctx, partitionedPrefix+name.String(), val, metadata.MustNotExist, 0)
	if errors.Is(err, metadata.ErrVersionMismatch) {
		cur, _ := a.b.partitionCount(ctx, name)
		return nil, GRPCError(fmt.Errorf("%w: partitioned topic %s (%d partitions)", ErrAlreadyExists, name, cur))
	}
	if err != nil {
		return nil, GRPCError(fmt.Errorf("%w: write partitioned topic %s: %v", ErrUnavailable, name, err))
	}
	a.b.policies.learn(kv)
	a.b.log.Info("partitioned topic created", "topic", name.String(), "partitions", r.GetPartitions())
	return &clientv1.PartitionedTopicMetadata{Topic: name.String(), Partitions: r.GetPartitions()}, nil
}

func (a *adminService) UpdatePartitionedTopic(ctx context.Context, r *clientv1.UpdatePartitionedTopicRequest) (*clientv1.PartitionedTopicMetadata, error) {
	if err := checkPartitions(r.GetPartitions()); err != nil {
		return nil, GRPCError(err)
	}
	name, err := a.b.parsePartitionedName(ctx, r.GetTopic(), r.GetPartitions())
	if err != nil {
		return nil, GRPCError(err)
	}
	key := partitionedPrefix + name.String()
	for attempt := 0; ; attempt++ {
		kv, err := a.b.cfg.Global.Get(ctx, key, metadata.ReadOptions{})
		if errors.Is(err, metadata.ErrNotFound) {
			return nil, GRPCError(fmt.Errorf("%w: topic %s is not partitioned (create it with create-partitioned-topic)", ErrNotFound, name))
		}
		if err != nil {
			return nil, GRPCError(fmt.Errorf("%w: read partitioned topic %s: %v", ErrUnavailable, name, err))
		}
		cur, err := parsePartitioned(name, kv.Value)
		if err != nil {
			return nil, GRPCError(err)
		}
		if r.GetPartitions() <= cur {
			// The text leaves out the topic: the client reads "topic" in an
			// INVALID_ARGUMENT message as a bad name.
			// Lowering would strand the messages of the dropped partitions
			// and remap keys; Pulsar refuses it too.
			return nil, GRPCError(fmt.Errorf("%w: partitions %d: the current count is %d and can only be raised (want more than %d, at most %d)", ErrInvalidArgument, r.GetPartitions(), cur, cur, MaxPartitions))
		}
		val, _ := json.Marshal(partitionedRecord{Partitions: r.GetPartitions()})
		nkv, err := a.b.cfg.Global.Put(ctx, key, val, kv.Version, 0)
		if errors.Is(err, metadata.ErrVersionMismatch) && attempt < 5 {
			continue
		}
		if err != nil {
			return nil, GRPCError(fmt.Errorf("%w: write partitioned topic %s: %v", ErrUnavailable, name, err))
		}
		a.b.policies.learn(nkv)
		a.b.log.Info("partitioned topic raised", "topic", name.String(), "from", cur, "to", r.GetPartitions())
		return &clientv1.PartitionedTopicMetadata{Topic: name.String(), Partitions: r.GetPartitions()}, nil
	}
}

func (a *adminService) GetPartitionedTopicMetadata(ctx context.Context, r *clientv1.GetPartitionedTopicMetadataRequest) (*clientv1.PartitionedTopicMetadata, error) {
	name, err := ParseTopic(r.GetTopic())
	if err != nil {
		return nil, GRPCError(err)
	}
	if _, err := a.b.getPolicies(ctx, name.NamespaceName()); err != nil {
		return nil, GRPCError(err)
	}
	md := &clientv1.PartitionedTopicMetadata{Topic: name.String()}
	kv, stale, err := a.b.policies.fresh(ctx, partitionedPrefix+name.String())
	md.Stale = stale
	switch {
	case errors.Is(err, metadata.ErrNotFound):
		return md, nil
	case err != nil:
		return nil, GRPCError(fmt.Errorf("%w: read partitioned topic %s: %v", ErrUnavailable, name, err))
	}
	if md.Partitions, err = parsePartitioned(name, kv.Value); err != nil {
		return nil, GRPCError(err)
	}
	return md, nil
}

func (a *adminService) DeletePartitionedTopic(ctx context.Context, r *clientv1.DeletePartitionedTopicRequest) (*clientv1.DeletePartitionedTopicResponse, error) {
	name, err := ParseTopic(r.GetTopic())
	if err != nil {
		return nil, GRPCError(err)
	}
	key := partitionedPrefix + name.String()
	kv, err := a.b.cfg.Global.Get(ctx, key, metadata.ReadOptions{})
	if errors.Is(err, metadata.ErrNotFound) {
		return nil, GRPCError(fmt.Errorf("%w: topic %s is not partitioned", ErrNotFound, name))
	}
	if err != nil {
		return nil, GRPCError(fmt.Errorf("%w: read partitioned topic %s: %v", ErrUnavailable, name, err))
	}
	n, err := parsePartitioned(name, kv.Value)
	if err != nil {
		return nil, GRPCError(err)
	}
	// Partitions first: the record goes only once none is left, so a
	// refused or failed delete can simply be run again.
	resp := &clientv1.DeletePartitionedTopicResponse{}
	for i := range int(n) {
		_, err := a.DeleteTopic(ctx, &clientv1.DeleteTopicRequest{Topic: PartitionName(name.String(), i), Force: r.GetForce()})
		if status.Code(err) == codes.NotFound {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("partition %d of %s (%d deleted before it; the partitioned topic is kept): %w", i, name, resp.DeletedPartitions, err)
		}
		resp.DeletedPartitions++
	}
	if err := a.b.cfg.Global.Delete(ctx, key, kv.Version); err != nil {
		if errors.Is(err, metadata.ErrVersionMismatch) {
			return nil, GRPCError(fmt.Errorf("%w: partitioned topic %s was raised while being deleted; retry", ErrUnavailable, name))
		}
		return nil, GRPCError(fmt.Errorf("%w: delete partitioned topic %s: %v", ErrUnavailable, name, err))
	}
	a.b.policies.forget(key)
	a.b.log.Info("partitioned topic deleted", "topic", name.String(), "partitions", n, "deleted_here", resp.DeletedPartitions)
	return resp, nil
}

// GetPartitions answers a client's question: is the topic partitioned,
// into how many partitions.
func (cs *clientService) GetPartitions(ctx context.Context, r *clientv1.GetPartitionsRequest) (*clientv1.GetPartitionsResponse, error) {
	name, err := ParseTopic(r.GetTopic())
	if err != nil {
		return nil, GRPCError(err)
	}
	n, err := cs.b.partitionCount(ctx, name)
	if err != nil {
		return nil, GRPCError(err)
	}
	return &clientv1.GetPartitionsResponse{Partitions: n}, nil
}

func (a *adminService) ListPartitionedTopics(ctx context.Context, r *clientv1.ListPartitionedTopicsRequest) (*clientv1.ListPartitionedTopicsResponse, error) {
	ns := r.GetNamespace()
	if _, _, err := ParseNamespace(ns); err != nil {
		return nil, GRPCError(err)
	}
	if _, err := a.b.getPolicies(ctx, ns); err != nil {
		return nil, GRPCError(err)
	}
	kvs, stale, err := a.b.policies.listFresh(ctx, partitionedPrefix+ns+"/")
	if err != nil {
		return nil, GRPCError(fmt.Errorf("%w: list partitioned topics of %s: %v", ErrUnavailable, ns, err))
	}
	resp := &clientv1.ListPartitionedTopicsResponse{Stale: stale}
	for _, kv := range kvs {
		name, err := ParseTopic(strings.TrimPrefix(kv.Key, partitionedPrefix))
		if err != nil {
			continue // a deeper key (not a topic of ns)
		}
		n, err := parsePartitioned(name, kv.Value)
		if err != nil {
			return nil, GRPCError(err)
		}
		resp.Topics = append(resp.Topics, &clientv1.PartitionedTopicMetadata{Topic: name.String(), Partitions: n})
	}
	sort.Slice(resp.Topics, func(i, j int) bool { return resp.Topics[i].Topic < resp.Topics[j].Topic })
	return resp, nil
}

// refusePartitionedBase fails for the name of a partitioned topic: its
// messages live in its partitions, and a plain topic of the same name
// would hide them from every partition-aware client. Lookups and topic
// creation call it; the Go client never looks the base name up.
//
// It fails open: when the global shard cannot be read (and the cache has
// not listed the prefix yet), the lookup goes on, so a region cut off from
// the global quorum keeps serving its topics.
func (s *Server) refusePartitionedBase(ctx context.Context, name TopicName) error {
	n, err := s.partitionCount(ctx, name)
	if err != nil {
		s.log.Debug("partitioned check skipped: partition count unreadable", "topic", name.String(), "err", err)
		return nil
	}
	if n == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s is a partitioned topic (%d partitions): use its partitions %s<i> (the Go client and the CLI do it for you)", ErrNotAllowed, name, n, PartitionSuffix)
}

// checkNoPartitioned fails when namespace ns still has partitioned
// topics (a namespace delete would orphan their records).
func (s *Server) checkNoPartitioned(ctx context.Context, ns string) error {
	var names []string
	err := listGlobal(ctx, s.cfg.Global, partitionedPrefix+ns+"/", func(kv metadata.KV) {
		names = append(names, strings.TrimPrefix(kv.Key, partitionedPrefix))
	})
	if err != nil {
		return err
	}
	if len(names) > 0 {
		return fmt.Errorf("%w: namespace %s has %d partitioned topics (%s); delete them first", ErrNotAllowed, ns, len(names), strings.Join(names[:min(len(names), 5)], ", "))
	}
	return nil
}

// addPartitionedAdminRoutes adds the partitioned-topic admin methods to
// the JSON admin API.
func addPartitionedAdminRoutes(routes map[string]adminRoute, a *adminService) {
	routes["CreatePartitionedTopic"] = route(func() *clientv1.CreatePartitionedTopicRequest { return &clientv1.CreatePartitionedTopicRequest{} }, a.CreatePartitionedTopic)
	routes["UpdatePartitionedTopic"] = route(func() *clientv1.UpdatePartitionedTopicRequest { return &clientv1.UpdatePartitionedTopicRequest{} }, a.UpdatePartitionedTopic)
	routes["GetPartitionedTopicMetadata"] = route(func() *clientv1.GetPartitionedTopicMetadataRequest {
		return &clientv1.GetPartitionedTopicMetadataRequest{}
	}, a.GetPartitionedTopicMetadata)
	routes["DeletePartitionedTopic"] = route(func() *clientv1.DeletePartitionedTopicRequest { return &clientv1.DeletePartitionedTopicRequest{} }, a.DeletePartitionedTopic)
	routes["ListPartitionedTopics"] = route(func() *clientv1.ListPartitionedTopicsRequest { return &clientv1.ListPartitionedTopicsRequest{} }, a.ListPartitionedTopics)
}
