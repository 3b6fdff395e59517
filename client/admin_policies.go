package client

import (
	"context"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// Prefix and topic-level policies (issue 10).
//
// A topic runs with its namespace's policies, overlaid by the policies of
// every topic-name prefix it falls under (shortest first: the longest
// prefix wins), overlaid by its own override. Prefixes and overrides set
// only the NamespacePolicies fields they name (proto names such as
// "retention_time_seconds"); the others inherit.
type (
	// PrefixPolicies are the policies of a topic-name prefix.
	PrefixPolicies = clientv1.PrefixPolicies
	// EffectivePolicies are the policies a topic runs with and where
	// each field above the namespace level comes from.
	EffectivePolicies = clientv1.GetEffectivePoliciesResponse
)

// ListTopicsWithPrefix lists the topics of "tenant/ns" whose name below
// the namespace starts with prefix ("video/" lists tenant/ns/video/...).
func (a *Admin) ListTopicsWithPrefix(ctx context.Context, namespace, prefix string) ([]string, error) {
	r, err := read(ctx, a, "list topics of "+namespace, func(ctx context.Context) (*clientv1.ListTopicsResponse, error) {
		return a.api.ListTopics(ctx, &clientv1.ListTopicsRequest{Namespace: namespace, Prefix: prefix})
	})
	return r.GetTopics(), err
}

// SetTopicPolicies sets the named fields of topic's override from p
// (fields empty = every field p populates); the others are kept.
func (a *Admin) SetTopicPolicies(ctx context.Context, topic string, p *NamespacePolicies, fields ...string) error {
	return write(ctx, a, "set policies of "+topic, func(ctx context.Context) error {
		_, err := a.api.SetTopicPolicies(ctx, &clientv1.SetTopicPoliciesRequest{Topic: topic, Policies: p, Fields: fields})
		return err
	})
}

// GetTopicPolicies returns topic's override and the fields it sets (none
// when the topic has no override).
func (a *Admin) GetTopicPolicies(ctx context.Context, topic string) (*NamespacePolicies, []string, error) {
	r, err := read(ctx, a, "get policies of "+topic, func(ctx context.Context) (*clientv1.GetTopicPoliciesResponse, error) {
		return a.api.GetTopicPolicies(ctx, &clientv1.GetTopicPoliciesRequest{Topic: topic})
	})
	return r.GetPolicies(), r.GetFields(), err
}

// RemoveTopicPolicies removes fields of topic's override (none = all).
func (a *Admin) RemoveTopicPolicies(ctx context.Context, topic string, fields ...string) error {
	return write(ctx, a, "remove policies of "+topic, func(ctx context.Context) error {
		_, err := a.api.RemoveTopicPolicies(ctx, &clientv1.RemoveTopicPoliciesRequest{Topic: topic, Fields: fields})
		return err
	})
}

// SetPrefixPolicies sets the named fields of the policies of prefix
// ("tenant/ns/seg/", ending in '/') from p (fields empty = every field p
// populates).
func (a *Admin) SetPrefixPolicies(ctx context.Context, prefix string, p *NamespacePolicies, fields ...string) error {
	return write(ctx, a, "set policies of prefix "+prefix, func(ctx context.Context) error {
		_, err := a.api.SetPrefixPolicies(ctx, &clientv1.SetPrefixPoliciesRequest{Prefix: prefix, Policies: p, Fields: fields})
		return err
	})
}

// ListPrefixPolicies lists the prefix policies of "tenant/ns".
func (a *Admin) ListPrefixPolicies(ctx context.Context, namespace string) ([]*PrefixPolicies, error) {
	r, err := read(ctx, a, "list prefix policies of "+namespace, func(ctx context.Context) (*clientv1.ListPrefixPoliciesResponse, error) {
		return a.api.ListPrefixPolicies(ctx, &clientv1.ListPrefixPoliciesRequest{Namespace: namespace})
	})
	return r.GetPrefixes(), err
}

// RemovePrefixPolicies removes fields of prefix's policies (none = all).
func (a *Admin) RemovePrefixPolicies(ctx context.Context, prefix string, fields ...string) error {
	return write(ctx, a, "remove policies of prefix "+prefix, func(ctx context.Context) error {
		_, err := a.api.RemovePrefixPolicies(ctx, &clientv1.RemovePrefixPoliciesRequest{Prefix: prefix, Fields: fields})
		return err
	})
}

// EffectivePolicies returns the policies topic runs with.
func (a *Admin) EffectivePolicies(ctx context.Context, topic string) (*EffectivePolicies, error) {
	return read(ctx, a, "get effective policies of "+topic, func(ctx context.Context) (*clientv1.GetEffectivePoliciesResponse, error) {
		return a.api.GetEffectivePolicies(ctx, &clientv1.GetEffectivePoliciesRequest{Topic: topic})
	})
}
