package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/metadata"
)

// Per-topic limits (issue 22 item 3): producers per topic, consumers per
// subscription, subscriptions per topic. Each is a broker config field
// (the default) and a namespace policy of the same name as Pulsar's,
// which topic and prefix policies override like any other; 0 means no
// limit. A refusal names the limit and its value, and changes nothing:
// the producer, consumer or cursor is never added.

// ErrLimitReached: a per-topic limit refuses the request.
var ErrLimitReached = errors.New("broker: limit reached")

// effectiveLimit is the policy's value when set, else the config's.
func effectiveLimit(policy *int32, config int) int {
	if policy != nil {
		return int(*policy)
	}
	return config
}

// policyField reads an optional field of p, nil when p is nil (a topic may
// have no policies) or the field is unset.
func policyField[T any](p *clientv1.NamespacePolicies, field func(*clientv1.NamespacePolicies) *T) *T {
	if p == nil {
		return nil
	}
	return field(p)
}

// limitReached reports whether count objects already use a limit (0: none).
func limitReached(limit, count int) bool { return limit > 0 && count >= limit }

func limitError(field string, limit int, what string) error {
	return fmt.Errorf("%w: %s is %d: %s", ErrLimitReached, field, limit, what)
}

// maxProducers and maxConsumers are t's limits (max_subscriptions_per_topic
// is read under t.mu in getOrCreateSubOpts). Callers must not hold t.mu.
func (t *topic) maxProducers() int {
	return effectiveLimit(policyField(t.currentPolicies(), func(p *clientv1.NamespacePolicies) *int32 { return p.MaxProducersPerTopic }), t.b.cfg.MaxProducersPerTopic)
}

func (t *topic) maxConsumers() int {
	return effectiveLimit(policyField(t.currentPolicies(), func(p *clientv1.NamespacePolicies) *int32 { return p.MaxConsumersPerSubscription }), t.b.cfg.MaxConsumersPerSubscription)
}

// clientSubsLocked counts t's subscriptions that count against
// max_subscriptions_per_topic: not replicator cursors. Callers hold t.mu.
func (t *topic) clientSubsLocked() int {
	n := 0
	for name := range t.subs {
		if !isReplName(name) {
			n++
		}
	}
	return n
}

// validateLimitPolicies checks the limit policies' ranges.
func validateLimitPolicies(p interface {
	GetMaxProducersPerTopic() int32
	GetMaxConsumersPerSubscription() int32
	GetMaxSubscriptionsPerTopic() int32
	GetMaxTopicsPerNamespace() int32
}) error {
	for _, f := range []struct {
		n string
		v int32
	}{{"max_producers_per_topic", p.GetMaxProducersPerTopic()}, {"max_consumers_per_subscription", p.GetMaxConsumersPerSubscription()},
		{"max_subscriptions_per_topic", p.GetMaxSubscriptionsPerTopic()}, {"max_topics_per_namespace", p.GetMaxTopicsPerNamespace()}} {
		if f.v < 0 {
			return fmt.Errorf("%w: %s %d must be >= 0 (0 = no limit)", ErrInvalidArgument, f.n, f.v)
		}
	}
	return nil
}

// Auto-creation switches (issue 22 item 3): allow_auto_topic_creation and
// allow_auto_subscription_creation, broker config fields and namespace
// policies of the same names (Pulsar's allowAutoTopicCreation and
// allowAutoSubscriptionCreation). With one off, clients use only what
// an operator created; the admin API and replication still create.

// autoAllowed is the policy's switch when set, else the config's.
func autoAllowed(policy *bool, config bool) bool {
	if policy != nil {
		return *policy
	}
	return config
}

// checkAutoTopicCreation refuses a client's use of a topic that does not
// exist when allow_auto_topic_creation is off for it, or when creating it
// would pass max_topics_per_namespace. A partition of an existing
// partitioned topic exists.
func (s *Server) checkAutoTopicCreation(ctx context.Context, name TopicName) error {
	return s.checkTopicCreation(ctx, name, true)
}

// checkTopicCreation checks the creation of a topic that may not exist:
// by a client (auto: the allow_auto_topic_creation switch applies) or by
// the admin API. Both respect max_topics_per_namespace.
func (s *Server) checkTopicCreation(ctx context.Context, name TopicName, auto bool) error {
	s.mu.Lock()
	_, loaded := s.topics[name.String()]
	s.mu.Unlock()
	if loaded {
		return nil // exists: nothing to check, no policies to resolve
	}
	pol, err := s.effectivePolicies(ctx, name)
	if err != nil {
		return err
	}
	autoOK := !auto || autoAllowed(policyField(pol, func(p *clientv1.NamespacePolicies) *bool { return p.AllowAutoTopicCreation }), s.cfg.AllowAutoTopicCreation)
	maxTopics := effectiveLimit(policyField(pol, func(p *clientv1.NamespacePolicies) *int32 { return p.MaxTopicsPerNamespace }), s.cfg.MaxTopicsPerNamespace)
	if autoOK && maxTopics <= 0 {
		return nil
	}
	if i := strings.LastIndex(name.Topic, PartitionSuffix); auto && i > 0 && isPartitionName(name.Topic) {
		idx, _ := strconv.Atoi(name.Topic[i+len(PartitionSuffix):])
		base := name
		base.Topic = name.Topic[:i]
		if n, err := s.partitionCount(ctx, base); err == nil && idx < int(n) {
			return nil
		}
	}
	if _, err := s.cfg.Regional.Get(ctx, managedLedgerPrefix+name.String(), metadata.ReadOptions{}); err == nil {
		return nil
	} else if !errors.Is(err, metadata.ErrNotFound) {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if !autoOK {
		return fmt.Errorf("%w: topic %s does not exist and allow_auto_topic_creation is false: create it with the admin API", ErrNotFound, name)
	}
	ns := name.NamespaceName()
	topics, err := listTopicKeys(ctx, s.cfg.Regional, managedLedgerPrefix+ns+"/")
	if err != nil {
		return err
	}
	if len(topics) >= maxTopics {
		return limitError("max_topics_per_namespace", maxTopics, fmt.Sprintf("namespace %s already has %d topics in this region", ns, len(topics)))
	}
	return nil
}

// autoSubscriptionCreation reports whether a consumer may create a
// durable subscription of t.
func (t *topic) autoSubscriptionCreation() bool {
	return autoAllowed(policyField(t.currentPolicies(), func(p *clientv1.NamespacePolicies) *bool { return p.AllowAutoSubscriptionCreation }), t.b.cfg.AllowAutoSubscriptionCreation)
}
