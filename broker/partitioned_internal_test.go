package broker

import (
	"testing"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// TestAggregateTopicStats: counters and rates add up, subscriptions of the
// same name merge (backlogs add, consumers concatenate, positions of one
// partition dropped), backlog_entries is the largest merged backlog.
func TestAggregateTopicStats(t *testing.T) {
	part := func(in, backlogS, backlogT int64, consumer string) *clientv1.TopicStats {
		return &clientv1.TopicStats{Topic: "t/ns/x-partition-?", OwnerBroker: "b1", MsgsInTotal: in, MsgRateIn: 1.5, Entries: in,
			BacklogEntries: max(backlogS, backlogT),
			Producers:      []*clientv1.ProducerStats{{ProducerName: "p"}},
			Subscriptions: []*clientv1.SubscriptionStats{
				{Name: "s", BacklogEntries: backlogS, Durable: true, MarkDeletePosition: &clientv1.MessageId{LedgerId: 1},
					Consumers: []*clientv1.ConsumerStats{{ConsumerName: consumer, UnackedEntries: 2}}},
				{Name: "t", BacklogEntries: backlogT},
			}}
	}
	agg := &clientv1.TopicStats{Topic: "t/ns/x", Partitions: 3}
	aggregateTopicStats(agg, []*clientv1.TopicStats{part(10, 4, 1, "c0"), part(20, 5, 1, "c1"), part(30, 0, 7, "c2")})
	if agg.Topic != "t/ns/x" || agg.OwnerBroker != "" || agg.Partitions != 3 {
		t.Fatalf("identity fields: %v", agg)
	}
	if agg.MsgsInTotal != 60 || agg.Entries != 60 || agg.MsgRateIn != 4.5 || len(agg.Producers) != 3 {
		t.Fatalf("sums: in %d entries %d rate %v producers %d", agg.MsgsInTotal, agg.Entries, agg.MsgRateIn, len(agg.Producers))
	}
	if len(agg.Subscriptions) != 2 {
		t.Fatalf("subscriptions %v", agg.Subscriptions)
	}
	s, u := agg.Subscriptions[0], agg.Subscriptions[1]
	if s.Name != "s" || s.BacklogEntries != 9 || !s.Durable || len(s.Consumers) != 3 || s.MarkDeletePosition != nil {
		t.Fatalf("merged s: %v", s)
	}
	if u.Name != "t" || u.BacklogEntries != 9 {
		t.Fatalf("merged t: %v", u)
	}
	if agg.BacklogEntries != 9 {
		t.Fatalf("backlog_entries %d, want the largest merged subscription's (9)", agg.BacklogEntries)
	}
}

// TestIsPartitionName: only "<name>-partition-<non-negative int>" names a
// partition.
func TestIsPartitionName(t *testing.T) {
	for name, want := range map[string]bool{
		"x-partition-0": true, "x-partition-12": true, "a-partition-b-partition-3": true,
		"x": false, "-partition-1": false, "x-partition-": false, "x-partition-a": false, "x-partition--1": false, "x-partition-+1": false,
	} {
		if got := isPartitionName(name); got != want {
			t.Errorf("isPartitionName(%q) = %v, want %v", name, got, want)
		}
	}
	if PartitionName("t/ns/x", 7) != "t/ns/x-partition-7" {
		t.Fatal(PartitionName("t/ns/x", 7))
	}
}
