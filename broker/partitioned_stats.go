package broker

import (
	"context"
	"sort"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// partitionedStats answers GetTopicStats for a partitioned topic's own
// name: the sum of its partitions' stats (ok false: not partitioned, the
// caller goes on as for any topic). Each partition's stats come from its
// owner (forwarded like any topic's); a partition not created yet in this
// region counts in missing_partitions.
func (a *adminService) partitionedStats(ctx context.Context, r *clientv1.GetTopicStatsRequest) (*clientv1.TopicStats, bool, error) {
	name, err := ParseTopic(r.GetTopic())
	if err != nil {
		return nil, false, nil // the plain path reports the bad name
	}
	n, err := a.b.partitionCount(ctx, name)
	if err != nil || n == 0 {
		// Unreadable count: answer for the name as a plain topic (it
		// fails with NOT_FOUND if there is none) rather than not at all.
		return nil, false, nil
	}
	agg := &clientv1.TopicStats{Topic: name.String(), Partitions: n}
	var parts []*clientv1.TopicStats
	for i := range int(n) {
		st, err := a.GetTopicStats(ctx, &clientv1.GetTopicStatsRequest{Topic: PartitionName(name.String(), i)})
		if status.Code(err) == codes.NotFound {
			agg.MissingPartitions++
			continue
		}
		if err != nil {
			return nil, true, err
		}
		parts = append(parts, st)
	}
	aggregateTopicStats(agg, parts)
	if r.GetPerPartition() {
		agg.PartitionStats = parts
	}
	return agg, true, nil
}

// aggregateTopicStats adds the partitions' stats into agg: numbers add up,
// flags OR, lists concatenate, subscriptions of the same name merge the
// same way, and backlog_entries is the largest merged subscription's.
// The merge walks the fields by reflection, so counters other parts add
// to TopicStats and SubscriptionStats aggregate without a change here;
// singular sub-messages (positions of one partition) are left out.
func aggregateTopicStats(agg *clientv1.TopicStats, parts []*clientv1.TopicStats) {
	subs := map[string]*clientv1.SubscriptionStats{}
	skip := map[protoreflect.Name]bool{"topic": true, "owner_broker": true, "subscriptions": true,
		"partitions": true, "partition_stats": true, "missing_partitions": true}
	// Positions and per-remote ack replication belong to one partition.
	subSkip := map[protoreflect.Name]bool{"name": true, "mark_delete_position": true, "ack_replication": true}
	for _, p := range parts {
		mergeStats(agg.ProtoReflect(), p.ProtoReflect(), skip)
		for _, s := range p.GetSubscriptions() {
			cur, ok := subs[s.GetName()]
			if !ok {
				subs[s.GetName()] = proto.CloneOf(s)
				subs[s.GetName()].MarkDeletePosition = nil
				subs[s.GetName()].AckReplication = nil
				continue
			}
			mergeStats(cur.ProtoReflect(), s.ProtoReflect(), subSkip)
		}
	}
	agg.Subscriptions = nil
	agg.BacklogEntries = 0
	for _, s := range subs {
		agg.Subscriptions = append(agg.Subscriptions, s)
		agg.BacklogEntries = max(agg.BacklogEntries, s.GetBacklogEntries())
	}
	sort.Slice(agg.Subscriptions, func(i, j int) bool { return agg.Subscriptions[i].Name < agg.Subscriptions[j].Name })
}

// mergeStats adds src's fields into dst (see aggregateTopicStats); fields
// named in skip are left alone.
func mergeStats(dst, src protoreflect.Message, skip map[protoreflect.Name]bool) {
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if skip[fd.Name()] {
			return true
		}
		if fd.IsMap() {
			// Counters by key (poison_entries): summed per key.
			if fd.MapValue().Kind() != protoreflect.Int64Kind {
				return true
			}
			dm := dst.Mutable(fd).Map()
			v.Map().Range(func(k protoreflect.MapKey, n protoreflect.Value) bool {
				sum := n.Int()
				if cur := dm.Get(k); cur.IsValid() {
					sum += cur.Int()
				}
				dm.Set(k, protoreflect.ValueOfInt64(sum))
				return true
			})
			return true
		}
		if fd.IsList() {
			if fd.Kind() != protoreflect.MessageKind {
				return true
			}
			dl := dst.Mutable(fd).List()
			sl := v.List()
			for i := range sl.Len() {
				dl.Append(protoreflect.ValueOfMessage(proto.Clone(sl.Get(i).Message().Interface()).ProtoReflect()))
			}
			return true
		}
		cur := dst.Get(fd)
		switch fd.Kind() {
		case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
			dst.Set(fd, protoreflect.ValueOfInt32(int32(cur.Int()+v.Int())))
		case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
			dst.Set(fd, protoreflect.ValueOfInt64(cur.Int()+v.Int()))
		case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
			dst.Set(fd, protoreflect.ValueOfUint32(uint32(cur.Uint()+v.Uint())))
		case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
			dst.Set(fd, protoreflect.ValueOfUint64(cur.Uint()+v.Uint()))
		case protoreflect.DoubleKind:
			dst.Set(fd, protoreflect.ValueOfFloat64(cur.Float()+v.Float()))
		case protoreflect.FloatKind:
			dst.Set(fd, protoreflect.ValueOfFloat32(float32(cur.Float()+v.Float())))
		case protoreflect.BoolKind:
			dst.Set(fd, protoreflect.ValueOfBool(cur.Bool() || v.Bool()))
		case protoreflect.StringKind, protoreflect.EnumKind, protoreflect.BytesKind:
			if !dst.Has(fd) {
				dst.Set(fd, v)
			}
		}
		return true
	})
}
