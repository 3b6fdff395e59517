package client

import (
	"context"
	"errors"
	"fmt"
	"strings"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// Admin types are the protocol's messages (package api/client/v1).
type (
	// NamespacePolicies are a namespace's retention, quorum and
	// replication policies.
	NamespacePolicies = clientv1.NamespacePolicies
	// TopicStats are a topic's rates, counters, backlog, producers and
	// subscriptions.
	TopicStats = clientv1.TopicStats
	// TopicInternalStats are a topic's ledgers and cursors.
	TopicInternalStats = clientv1.TopicInternalStats
	// BrokerInfo describes a live broker.
	BrokerInfo = clientv1.BrokerInfo
	// BookieScrub is what a bookie scrub found.
	BookieScrub = clientv1.ScrubBookieResponse
)

// Admin manages tenants, namespaces, topics and subscriptions. Any broker
// answers; topic operations are forwarded to the owner by the broker.
// Safe for concurrent use.
type Admin struct {
	c   *Client
	api clientv1.AdminClient
}

// NewAdmin connects an admin client to the broker at url (host:port).
func NewAdmin(ctx context.Context, url string) (*Admin, error) {
	return NewAdminWithOptions(ctx, Options{URL: url})
}

// NewAdminWithOptions connects an admin client with full client options.
func NewAdminWithOptions(ctx context.Context, opts Options) (*Admin, error) {
	c, err := New(ctx, opts)
	if err != nil {
		return nil, err
	}
	return c.Admin()
}

// Admin returns an admin client sharing c's connections.
func (c *Client) Admin() (*Admin, error) {
	cc, err := c.conn(c.primary)
	if err != nil {
		return nil, err
	}
	return &Admin{c: c, api: clientv1.NewAdminClient(cc)}, nil
}

// Close closes the Client the admin uses: call it on admins from NewAdmin,
// not on one obtained from Client.Admin while the Client is still in use.
func (a *Admin) Close(ctx context.Context) error { return a.c.Close(ctx) }

// read runs an idempotent call, retrying transient failures with backoff
// until the operation timeout.
func read[T any](ctx context.Context, a *Admin, what string, call func(context.Context) (T, error)) (T, error) {
	ctx, cancel := a.c.opTimeout(ctx)
	defer cancel()
	bo := newBackoff(a.c.opts.InitialBackoff, a.c.opts.MaxBackoff)
	for {
		v, err := call(ctx)
		if err == nil {
			return v, nil
		}
		err = mapError(err)
		if !errors.Is(err, ErrUnavailable) || bo.wait(ctx) != nil {
			var zero T
			return zero, fmt.Errorf("%s: %w", what, userError(err))
		}
	}
}

// write runs a non-idempotent call once.
func write(ctx context.Context, a *Admin, what string, call func(context.Context) error) error {
	ctx, cancel := a.c.opTimeout(ctx)
	defer cancel()
	if err := call(ctx); err != nil {
		return fmt.Errorf("%s: %w", what, userError(mapError(err)))
	}
	return nil
}

// ListTenants lists tenant names.
func (a *Admin) ListTenants(ctx context.Context) ([]string, error) {
	r, err := read(ctx, a, "list tenants", func(ctx context.Context) (*clientv1.ListTenantsResponse, error) {
		return a.api.ListTenants(ctx, &clientv1.ListTenantsRequest{})
	})
	return r.GetTenants(), err
}

// CreateTenant creates a tenant; allowedRegions empty = all regions.
func (a *Admin) CreateTenant(ctx context.Context, tenant string, allowedRegions ...string) error {
	return write(ctx, a, "create tenant "+tenant, func(ctx context.Context) error {
		_, err := a.api.CreateTenant(ctx, &clientv1.CreateTenantRequest{Tenant: tenant, AllowedRegions: allowedRegions})
		return err
	})
}

// DeleteTenant deletes an empty tenant.
func (a *Admin) DeleteTenant(ctx context.Context, tenant string) error {
	return write(ctx, a, "delete tenant "+tenant, func(ctx context.Context) error {
		_, err := a.api.DeleteTenant(ctx, &clientv1.DeleteTenantRequest{Tenant: tenant})
		return err
	})
}

// ListNamespaces lists the namespaces ("tenant/ns") of a tenant.
func (a *Admin) ListNamespaces(ctx context.Context, tenant string) ([]string, error) {
	r, err := read(ctx, a, "list namespaces of "+tenant, func(ctx context.Context) (*clientv1.ListNamespacesResponse, error) {
		return a.api.ListNamespaces(ctx, &clientv1.ListNamespacesRequest{Tenant: tenant})
	})
	return r.GetNamespaces(), err
}

// CreateNamespace creates "tenant/ns"; policies nil = defaults.
func (a *Admin) CreateNamespace(ctx context.Context, namespace string, policies *NamespacePolicies) error {
	return write(ctx, a, "create namespace "+namespace, func(ctx context.Context) error {
		_, err := a.api.CreateNamespace(ctx, &clientv1.CreateNamespaceRequest{Namespace: namespace, Policies: policies})
		return err
	})
}

// DeleteNamespace deletes a namespace without topics.
func (a *Admin) DeleteNamespace(ctx context.Context, namespace string) error {
	return write(ctx, a, "delete namespace "+namespace, func(ctx context.Context) error {
		_, err := a.api.DeleteNamespace(ctx, &clientv1.DeleteNamespaceRequest{Namespace: namespace})
		return err
	})
}

// GetNamespacePolicies returns a namespace's policies.
func (a *Admin) GetNamespacePolicies(ctx context.Context, namespace string) (*NamespacePolicies, error) {
	r, err := read(ctx, a, "get policies of "+namespace, func(ctx context.Context) (*clientv1.GetNamespacePoliciesResponse, error) {
		return a.api.GetNamespacePolicies(ctx, &clientv1.GetNamespacePoliciesRequest{Namespace: namespace})
	})
	return r.GetPolicies(), err
}

// SetNamespacePolicies replaces a namespace's policies (every field).
func (a *Admin) SetNamespacePolicies(ctx context.Context, namespace string, p *NamespacePolicies) error {
	return write(ctx, a, "set policies of "+namespace, func(ctx context.Context) error {
		_, err := a.api.SetNamespacePolicies(ctx, &clientv1.SetNamespacePoliciesRequest{Namespace: namespace, Policies: p})
		return err
	})
}

// ListTopics lists the topics of "tenant/ns".
func (a *Admin) ListTopics(ctx context.Context, namespace string) ([]string, error) {
	r, err := read(ctx, a, "list topics of "+namespace, func(ctx context.Context) (*clientv1.ListTopicsResponse, error) {
		return a.api.ListTopics(ctx, &clientv1.ListTopicsRequest{Namespace: namespace})
	})
	return r.GetTopics(), err
}

// CreateTopic creates "tenant/ns/topic".
func (a *Admin) CreateTopic(ctx context.Context, topic string) error {
	if err := ValidateTopicName(topic); err != nil {
		return err
	}
	return write(ctx, a, "create topic "+topic, func(ctx context.Context) error {
		_, err := a.api.CreateTopic(ctx, &clientv1.CreateTopicRequest{Topic: topic})
		return err
	})
}

// DeleteTopic deletes a topic and its ledgers; force disconnects its
// producers and consumers first.
func (a *Admin) DeleteTopic(ctx context.Context, topic string, force bool) error {
	return write(ctx, a, "delete topic "+topic, func(ctx context.Context) error {
		_, err := a.api.DeleteTopic(ctx, &clientv1.DeleteTopicRequest{Topic: topic, Force: force})
		return err
	})
}

// TopicStats returns a topic's stats.
func (a *Admin) TopicStats(ctx context.Context, topic string) (*TopicStats, error) {
	return read(ctx, a, "stats of "+topic, func(ctx context.Context) (*clientv1.TopicStats, error) {
		return a.api.GetTopicStats(ctx, &clientv1.GetTopicStatsRequest{Topic: topic})
	})
}

// TopicInternalStats returns a topic's ledgers and cursors.
func (a *Admin) TopicInternalStats(ctx context.Context, topic string) (*TopicInternalStats, error) {
	return read(ctx, a, "internal stats of "+topic, func(ctx context.Context) (*clientv1.TopicInternalStats, error) {
		return a.api.GetTopicInternalStats(ctx, &clientv1.GetTopicInternalStatsRequest{Topic: topic})
	})
}

// UnloadTopic makes the owner release the topic; the next lookup assigns
// it again (possibly to another broker).
func (a *Admin) UnloadTopic(ctx context.Context, topic string) error {
	return write(ctx, a, "unload topic "+topic, func(ctx context.Context) error {
		_, err := a.api.UnloadTopic(ctx, &clientv1.UnloadTopicRequest{Topic: topic})
		return err
	})
}

// ListSubscriptions lists a topic's subscriptions.
func (a *Admin) ListSubscriptions(ctx context.Context, topic string) ([]string, error) {
	r, err := read(ctx, a, "list subscriptions of "+topic, func(ctx context.Context) (*clientv1.ListSubscriptionsResponse, error) {
		return a.api.ListSubscriptions(ctx, &clientv1.ListSubscriptionsRequest{Topic: topic})
	})
	return r.GetSubscriptions(), err
}

// CreateSubscription creates a subscription starting at pos.
func (a *Admin) CreateSubscription(ctx context.Context, topic, sub string, pos InitialPosition) error {
	return write(ctx, a, "create subscription "+sub, func(ctx context.Context) error {
		_, err := a.api.CreateSubscription(ctx, &clientv1.CreateSubscriptionRequest{Topic: topic, Subscription: sub, InitialPosition: positionToProto(pos)})
		return err
	})
}

// CreateReplicatedSubscription creates a replicated subscription at pos:
// its acknowledgements are replicated to every region of the namespace
// (see ConsumerOptions.Replicated).
func (a *Admin) CreateReplicatedSubscription(ctx context.Context, topic, sub string, pos InitialPosition) error {
	return write(ctx, a, "create subscription "+sub, func(ctx context.Context) error {
		_, err := a.api.CreateSubscription(ctx, &clientv1.CreateSubscriptionRequest{Topic: topic, Subscription: sub, InitialPosition: positionToProto(pos), Replicated: true})
		return err
	})
}

// DeleteSubscription deletes a subscription; force disconnects its
// consumers first.
func (a *Admin) DeleteSubscription(ctx context.Context, topic, sub string, force bool) error {
	return write(ctx, a, "delete subscription "+sub, func(ctx context.Context) error {
		_, err := a.api.DeleteSubscription(ctx, &clientv1.DeleteSubscriptionRequest{Topic: topic, Subscription: sub, Force: force})
		return err
	})
}

// ResetPosition is where ResetSubscription moves a cursor: exactly one of
// its fields is used, in this order: MessageID, PublishTimeMs, Initial.
type ResetPosition struct {
	// MessageID, when set, makes this entry the next one delivered.
	MessageID *MessageID
	// PublishTimeMs (> 0) makes the first entry published at or after
	// it the next one delivered.
	PublishTimeMs int64
	// Initial is used when neither field above is set.
	Initial InitialPosition
}

// ResetSubscription moves a subscription's cursor.
func (a *Admin) ResetSubscription(ctx context.Context, topic, sub string, pos ResetPosition) error {
	req := &clientv1.ResetSubscriptionRequest{Topic: topic, Subscription: sub}
	switch {
	case pos.MessageID != nil:
		req.Position = &clientv1.ResetSubscriptionRequest_MessageId{MessageId: pos.MessageID.toProto()}
	case pos.PublishTimeMs > 0:
		req.Position = &clientv1.ResetSubscriptionRequest_PublishTimeMs{PublishTimeMs: pos.PublishTimeMs}
	default:
		req.Position = &clientv1.ResetSubscriptionRequest_InitialPosition{InitialPosition: positionToProto(pos.Initial)}
	}
	return write(ctx, a, "reset subscription "+sub, func(ctx context.Context) error {
		_, err := a.api.ResetSubscription(ctx, req)
		return err
	})
}

// ListBrokers lists the region's live brokers.
func (a *Admin) ListBrokers(ctx context.Context) ([]*BrokerInfo, error) {
	r, err := read(ctx, a, "list brokers", func(ctx context.Context) (*clientv1.ListBrokersResponse, error) {
		return a.api.ListBrokers(ctx, &clientv1.ListBrokersRequest{})
	})
	return r.GetBrokers(), err
}

// ParseResetPosition parses "earliest", "latest", a message ID "L:E:B" or
// a Unix-ms publish time prefixed with "@" ("@1700000000000").
func ParseResetPosition(s string) (ResetPosition, error) {
	switch {
	case s == "earliest":
		return ResetPosition{Initial: Earliest}, nil
	case s == "latest":
		return ResetPosition{Initial: Latest}, nil
	case strings.HasPrefix(s, "@"):
		var ms int64
		if _, err := fmt.Sscanf(s[1:], "%d", &ms); err != nil || ms <= 0 {
			return ResetPosition{}, fmt.Errorf("%w: reset position %q: want @<unix-ms> > 0", ErrInvalidArgument, s)
		}
		return ResetPosition{PublishTimeMs: ms}, nil
	}
	id, err := ParseMessageID(s)
	if err != nil {
		return ResetPosition{}, fmt.Errorf("%w (or earliest, latest, @<unix-ms>)", err)
	}
	return ResetPosition{MessageID: &id}, nil
}

// ScrubBookie asks bookie id to verify the CRC of every entry it stores and
// to mark damaged ledgers under-replicated (repaired from healthy replicas
// by autorecovery); it returns what the scrub found. The scrub reads at the
// bookie's scrub rate: give ctx a deadline long enough for its data.
func (a *Admin) ScrubBookie(ctx context.Context, id string) (*BookieScrub, error) {
	var r *BookieScrub
	err := write(ctx, a, "scrub bookie "+id, func(ctx context.Context) error {
		var err error
		r, err = a.api.ScrubBookie(ctx, &clientv1.ScrubBookieRequest{BookieId: id})
		return err
	})
	return r, err
}
