package client

import (
	"context"
	"fmt"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// PartitionedTopicMetadata is a partitioned topic's partition count.
type PartitionedTopicMetadata = clientv1.PartitionedTopicMetadata

// MaxPartitions is the broker's limit on a topic's partition count.
const MaxPartitions = 1024

func checkPartitionCount(n int) error {
	if n < 1 || n > MaxPartitions {
		return fmt.Errorf("%w: partitions %d is out of range: want 1..%d", ErrInvalidArgument, n, MaxPartitions)
	}
	return nil
}

// CreatePartitionedTopic makes topic a partitioned topic of n partitions
// (1..MaxPartitions), named "<topic>-partition-<i>". The record is global:
// every region sees it.
func (a *Admin) CreatePartitionedTopic(ctx context.Context, topic string, n int) error {
	if err := ValidateTopicName(topic); err != nil {
		return err
	}
	if err := checkPartitionCount(n); err != nil {
		return err
	}
	return write(ctx, a, "create partitioned topic "+topic, func(ctx context.Context) error {
		_, err := a.api.CreatePartitionedTopic(ctx, &clientv1.CreatePartitionedTopicRequest{Topic: topic, Partitions: int32(n)})
		return err
	})
}

// UpdatePartitionedTopic raises topic's partition count to n. Lowering it
// (or keeping it) is refused with ErrInvalidArgument naming the current
// count. Producers and consumers open the new partitions within their
// PartitionsAutoDiscoveryInterval.
func (a *Admin) UpdatePartitionedTopic(ctx context.Context, topic string, n int) error {
	if err := ValidateTopicName(topic); err != nil {
		return err
	}
	if err := checkPartitionCount(n); err != nil {
		return err
	}
	return write(ctx, a, "update partitioned topic "+topic, func(ctx context.Context) error {
		_, err := a.api.UpdatePartitionedTopic(ctx, &clientv1.UpdatePartitionedTopicRequest{Topic: topic, Partitions: int32(n)})
		return err
	})
}

// PartitionedTopicMetadata returns topic's partition count (Partitions 0:
// not partitioned).
func (a *Admin) PartitionedTopicMetadata(ctx context.Context, topic string) (*PartitionedTopicMetadata, error) {
	return read(ctx, a, "partitioned topic metadata of "+topic, func(ctx context.Context) (*clientv1.PartitionedTopicMetadata, error) {
		return a.api.GetPartitionedTopicMetadata(ctx, &clientv1.GetPartitionedTopicMetadataRequest{Topic: topic})
	})
}

// DeletePartitionedTopic deletes topic's partitions in this region and
// its partition record; force disconnects their producers and consumers.
// It returns how many partitions were deleted here.
func (a *Admin) DeletePartitionedTopic(ctx context.Context, topic string, force bool) (int, error) {
	var n int32
	err := write(ctx, a, "delete partitioned topic "+topic, func(ctx context.Context) error {
		r, err := a.api.DeletePartitionedTopic(ctx, &clientv1.DeletePartitionedTopicRequest{Topic: topic, Force: force})
		n = r.GetDeletedPartitions()
		return err
	})
	return int(n), err
}

// PartitionedTopicStats returns a partitioned topic's aggregated stats
// with each partition's (PartitionStats). On a plain topic it returns the
// topic's stats (Partitions 0).
func (a *Admin) PartitionedTopicStats(ctx context.Context, topic string) (*TopicStats, error) {
	return read(ctx, a, "partitioned stats of "+topic, func(ctx context.Context) (*clientv1.TopicStats, error) {
		return a.api.GetTopicStats(ctx, &clientv1.GetTopicStatsRequest{Topic: topic, PerPartition: true})
	})
}

// ListPartitionedTopics lists namespace's partitioned topics with their
// partition counts.
func (a *Admin) ListPartitionedTopics(ctx context.Context, namespace string) ([]*PartitionedTopicMetadata, error) {
	r, err := read(ctx, a, "list partitioned topics of "+namespace, func(ctx context.Context) (*clientv1.ListPartitionedTopicsResponse, error) {
		return a.api.ListPartitionedTopics(ctx, &clientv1.ListPartitionedTopicsRequest{Namespace: namespace})
	})
	return r.GetTopics(), err
}
