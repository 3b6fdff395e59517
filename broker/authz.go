package broker

import (
	"context"
	"fmt"
	"slices"
	"strings"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/security"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Authorization (issue 21): a rule for every method of the Meridian, Admin
// and Replication services, enforced when security.auth is enabled (with
// auth off every call passes, as before). A method without a rule is
// denied; TestBrokerRuleTableCoversEveryMethod fails for it.
//
// Rules (superusers pass every one of them):
//
//   - superuser: cluster-wide operations (tenants' creation, deletion,
//     admin roles and allowed regions; brokers, bookies, autorecovery,
//     metadata, ledgers, regions, failover targets);
//   - tenantAdmin: an admin operation inside the tenant of the request's
//     tenant, namespace, topic or prefix field;
//   - produce, consume (topic): a grant (namespace, prefix or topic) or a
//     tenant admin role; Produce and Consume are checked on the stream's
//     first message (open / subscribe), before the handler sees it;
//   - lookup (topic): produce or consume;
//   - component(kinds): a component identity "<kind>.<region>" of one of
//     the kinds (the Replication service: brokers of any region; phase 2b
//     checks the region against the entries in the handler);
//   - authenticated: any authenticated identity.
//
// Brokers of the broker's own region (security.ComponentRole(broker,
// region)) pass every Meridian and Admin rule: a broker forwards an admin
// call it does not own to the owner with its own certificate, after the
// first broker checked the caller. Brokers of any region pass lookup
// rules (a remote region's replicator looks topics up).

// ruleKind is what a rule requires.
type ruleKind int

const (
	ruleSuperuser ruleKind = iota + 1
	ruleTenantAdmin
	ruleProduce
	ruleConsume
	ruleLookup
	ruleComponent
	ruleAuthenticated
)

func (k ruleKind) String() string {
	switch k {
	case ruleSuperuser:
		return "superuser"
	case ruleTenantAdmin:
		return "tenant-admin"
	case ruleProduce:
		return "produce"
	case ruleConsume:
		return "consume"
	case ruleLookup:
		return "lookup"
	case ruleComponent:
		return "component"
	case ruleAuthenticated:
		return "authenticated"
	}
	return "unknown"
}

// authRule is one method's rule.
type authRule struct {
	kind ruleKind
	// kinds are the component kinds of a ruleComponent.
	kinds []string
	// firstMessage marks a streaming method whose resource is in the first
	// message (checked by the stream wrapper before the handler sees it).
	firstMessage bool
}

// Rule constructors.
var (
	superuser     = authRule{kind: ruleSuperuser}
	tenantAdmin   = authRule{kind: ruleTenantAdmin}
	lookup        = authRule{kind: ruleLookup}
	authenticated = authRule{kind: ruleAuthenticated}
)

func component(kinds ...string) authRule { return authRule{kind: ruleComponent, kinds: kinds} }

// brokerRules maps every full method name of the broker's services to its
// rule.
var brokerRules = func() map[string]authRule {
	m := map[string]authRule{}
	add := func(service string, rules map[string]authRule) {
		for name, r := range rules {
			m["/"+service+"/"+name] = r
		}
	}
	add(clientv1.Meridian_ServiceDesc.ServiceName, map[string]authRule{
		"Lookup":        lookup,
		"GetPartitions": lookup,
		"Produce":       {kind: ruleProduce, firstMessage: true},
		"Consume":       {kind: ruleConsume, firstMessage: true},
	})
	add(clientv1.Replication_ServiceDesc.ServiceName, map[string]authRule{
		"Replicate":              component(security.KindBroker),
		"ReplicateSubscriptions": component(security.KindBroker),
	})
	add(clientv1.Admin_ServiceDesc.ServiceName, map[string]authRule{
		// Tenants: cluster-wide but reading one's own tenant.
		"ListTenants":             superuser,
		"CreateTenant":            superuser,
		"DeleteTenant":            superuser,
		"UpdateTenant":            superuser,
		"SetTenantAllowedRegions": superuser,
		"GetTenant":               tenantAdmin,
		// Namespaces.
		"ListNamespaces":           tenantAdmin,
		"CreateNamespace":          tenantAdmin,
		"DeleteNamespace":          tenantAdmin,
		"GetNamespacePolicies":     tenantAdmin,
		"SetNamespacePolicies":     tenantAdmin,
		"SetNamespaceReplication":  tenantAdmin,
		"GetNamespaceReplication":  tenantAdmin,
		"DeleteReplicationCursors": tenantAdmin,
		// Topics and subscriptions.
		"ListTopics":             tenantAdmin,
		"CreateTopic":            tenantAdmin,
		"DeleteTopic":            tenantAdmin,
		"GetTopicStats":          tenantAdmin,
		"GetTopicInternalStats":  tenantAdmin,
		"UnloadTopic":            tenantAdmin,
		"ListSubscriptions":      tenantAdmin,
		"CreateSubscription":     tenantAdmin,
		"DeleteSubscription":     tenantAdmin,
		"ResetSubscription":      tenantAdmin,
		"SkipMessages":           tenantAdmin,
		"ClearBacklog":           tenantAdmin,
		"ExpireMessages":         tenantAdmin,
		"SetTopicReplication":    tenantAdmin,
		"GetTopicReplication":    tenantAdmin,
		"RemoveTopicReplication": tenantAdmin,
		// Policies.
		"SetTopicPolicies":     tenantAdmin,
		"GetTopicPolicies":     tenantAdmin,
		"RemoveTopicPolicies":  tenantAdmin,
		"SetPrefixPolicies":    tenantAdmin,
		"ListPrefixPolicies":   tenantAdmin,
		"RemovePrefixPolicies": tenantAdmin,
		"GetEffectivePolicies": tenantAdmin,
		// Grants.
		"GrantPermission":  tenantAdmin,
		"RevokePermission": tenantAdmin,
		"GetPermissions":   tenantAdmin,
		// Schemas: reading them is part of producing and consuming (a
		// typed consumer fetches the writer's schema).
		"UploadSchema":            tenantAdmin,
		"DeleteSchema":            tenantAdmin,
		"SetSchemaCompatibility":  tenantAdmin,
		"GetSchema":               lookup,
		"ListSchemaVersions":      lookup,
		"TestSchemaCompatibility": lookup,
		"GetSchemaCompatibility":  lookup,
		// Partitioned topics.
		"CreatePartitionedTopic":      tenantAdmin,
		"UpdatePartitionedTopic":      tenantAdmin,
		"DeletePartitionedTopic":      tenantAdmin,
		"ListPartitionedTopics":       tenantAdmin,
		"GetPartitionedTopicMetadata": lookup,
		// Cluster-wide: superusers only.
		"ListBrokers":           superuser,
		"ListBookies":           superuser,
		"GetAutorecoveryStatus": superuser,
		"PauseAutorecovery":     superuser,
		"ResumeAutorecovery":    superuser,
		"DecommissionBookie":    superuser,
		"RecommissionBookie":    superuser,
		"GetMetadataStatus":     superuser,
		"GetMetadataKey":        superuser,
		"ListMetadataKeys":      superuser,
		"GetLedger":             superuser,
		"ListTopicLedgers":      superuser,
		"ScrubBookie":           superuser,
		"SkipLostEntries":       superuser,
		"ListRegions":           superuser,
		"SetFailoverTarget":     superuser,
		// A failover-group client polls its group's target.
		"GetFailoverTarget": authenticated,
	})
	return m
}()

// authzOn reports whether calls are authorized (security.auth enabled).
func (s *Server) authzOn() bool { return s.sec.AuthEnabled() }

// isSuperuser reports whether role is one of security.superusers.
func (s *Server) isSuperuser(role string) bool {
	return role != "" && slices.Contains(s.sec.Config().Superusers, role)
}

// denied is the PermissionDenied of a refused call.
func denied(method string, id security.Identity, why string) error {
	return status.Errorf(codes.PermissionDenied, "%s: role %q may not call it: %s", method, id.Role, why)
}

// Authorize implements security.Authorizer: the method-level part of the
// rule table (no request yet). Rules that need the request pass here and
// are decided by authorizeRequest (unary interceptor, HTTP) or on the
// stream's first message.
func (s *Server) Authorize(_ context.Context, method string, id security.Identity) error {
	if !s.authzOn() {
		return nil
	}
	r, ok := brokerRules[method]
	if !ok {
		return denied(method, id, "the method has no authorization rule")
	}
	if s.isSuperuser(id.Role) {
		return nil
	}
	kind, region, isComp := security.ParseComponent(id.Role)
	localBroker := isComp && kind == security.KindBroker && region == s.cfg.Region
	switch r.kind {
	case ruleSuperuser:
		if localBroker && !strings.HasPrefix(method, "/"+clientv1.Replication_ServiceDesc.ServiceName+"/") {
			return nil
		}
		return denied(method, id, "superusers only")
	case ruleComponent:
		if isComp && slices.Contains(r.kinds, kind) {
			return nil
		}
		return denied(method, id, "components only ("+strings.Join(r.kinds, ", ")+")")
	}
	return nil
}

// authorizeRequest decides a rule that reads the request: unary calls
// (after Authorize), HTTP admin routes and the first message of a stream.
func (s *Server) authorizeRequest(ctx context.Context, method string, id security.Identity, req proto.Message) error {
	if !s.authzOn() {
		return nil
	}
	if err := s.Authorize(ctx, method, id); err != nil {
		return err
	}
	r := brokerRules[method]
	if s.isSuperuser(id.Role) {
		return nil
	}
	kind, region, isComp := security.ParseComponent(id.Role)
	if isComp && kind == security.KindBroker {
		if region == s.cfg.Region {
			return nil
		}
		if r.kind == ruleLookup {
			return nil
		}
	}
	switch r.kind {
	case ruleSuperuser, ruleComponent, ruleAuthenticated:
		return nil // decided by Authorize
	case ruleTenantAdmin:
		tenants, err := tenantsOf(req)
		if err != nil {
			return GRPCError(err)
		}
		for _, tenant := range tenants {
			ok, err := s.isTenantAdmin(ctx, tenant, id.Role)
			if err != nil {
				return GRPCError(err)
			}
			if !ok {
				return denied(method, id, "not an admin role of tenant "+tenant)
			}
		}
		return nil
	case ruleProduce, ruleConsume, ruleLookup:
		t, err := topicOf(req)
		if err != nil {
			return GRPCError(err)
		}
		actions := []string{ActionProduce}
		switch r.kind {
		case ruleConsume:
			actions = []string{ActionConsume}
		case ruleLookup:
			actions = []string{ActionProduce, ActionConsume}
		}
		return s.authorizeTopic(ctx, method, id, t, actions...)
	}
	return denied(method, id, "unknown rule")
}

// authorizeTopic passes a tenant admin of t's tenant or a role granted one
// of actions on t.
func (s *Server) authorizeTopic(ctx context.Context, method string, id security.Identity, t TopicName, actions ...string) error {
	ok, err := s.isTenantAdmin(ctx, t.Tenant, id.Role)
	if err != nil {
		return GRPCError(err)
	}
	if ok {
		return nil
	}
	for _, a := range actions {
		ok, err := s.granted(ctx, t, id.Role, a)
		if err != nil {
			return GRPCError(err)
		}
		if ok {
			return nil
		}
	}
	return denied(method, id, "no "+strings.Join(actions, " or ")+" grant on topic "+t.String())
}

// stringField returns the string field name of m ("" when absent).
func stringField(m protoreflect.Message, name string) string {
	fd := m.Descriptor().Fields().ByName(protoreflect.Name(name))
	if fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList() {
		return ""
	}
	return m.Get(fd).String()
}

// resourceFields are the request fields a tenant is read from, in order.
var resourceFields = []string{"topic", "namespace", "prefix", "tenant"}

// tenantsOf returns the tenants of a request's topic, namespace, prefix
// and tenant fields (every one set: a caller must administer all of
// them).
func tenantsOf(req proto.Message) ([]string, error) {
	if req == nil {
		return nil, fmt.Errorf("%w: no request", ErrInvalidArgument)
	}
	m := req.ProtoReflect()
	var out []string
	for _, f := range resourceFields {
		v := stringField(m, f)
		if v == "" {
			continue
		}
		tenant, _, _ := strings.Cut(v, "/")
		if err := ValidateName(f+" (its tenant)", tenant); err != nil {
			return nil, err
		}
		if !slices.Contains(out, tenant) {
			out = append(out, tenant)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: the request names no topic, namespace, prefix or tenant", ErrInvalidArgument)
	}
	return out, nil
}

// topicOf returns the topic of a request: its topic field, or the topic of
// the first stream message (OpenProducer, Subscribe).
func topicOf(req proto.Message) (TopicName, error) {
	switch r := req.(type) {
	case *clientv1.ProduceRequest:
		if r.GetOpen() == nil {
			return TopicName{}, fmt.Errorf("%w: the first produce request must be open", ErrInvalidArgument)
		}
		return ParseTopic(r.GetOpen().GetTopic())
	case *clientv1.ConsumeRequest:
		if r.GetSubscribe() == nil {
			return TopicName{}, fmt.Errorf("%w: the first consume request must be subscribe", ErrInvalidArgument)
		}
		return ParseTopic(r.GetSubscribe().GetTopic())
	}
	if req == nil {
		return TopicName{}, fmt.Errorf("%w: no request", ErrInvalidArgument)
	}
	return ParseTopic(stringField(req.ProtoReflect(), "topic"))
}

// authzUnary decides the request part of a unary call's rule.
func (s *Server) authzUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if s.authzOn() {
		m, _ := req.(proto.Message)
		if err := s.authorizeRequest(ctx, info.FullMethod, security.IdentityFrom(ctx), m); err != nil {
			return nil, err
		}
	}
	return h(ctx, req)
}

// authzStream checks a firstMessage rule on the stream's first message,
// before the handler sees it (the handler's Recv returns the refusal).
func (s *Server) authzStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if !s.authzOn() || !brokerRules[info.FullMethod].firstMessage {
		return h(srv, ss)
	}
	return h(srv, &firstMessageStream{ServerStream: ss, check: func(m any) error {
		pm, _ := m.(proto.Message)
		return s.authorizeRequest(ss.Context(), info.FullMethod, security.IdentityFrom(ss.Context()), pm)
	}})
}

// firstMessageStream runs check on the first message received.
type firstMessageStream struct {
	grpc.ServerStream
	check   func(m any) error
	checked bool
	err     error // the first message's refusal, returned ever after
}

// RecvMsg implements grpc.ServerStream.
func (f *firstMessageStream) RecvMsg(m any) error {
	if f.err != nil {
		return f.err
	}
	if err := f.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if !f.checked {
		f.checked = true
		f.err = f.check(m)
	}
	return f.err
}

// authzServerOptions are the interceptors of the rule table's request
// part; they run after the security runtime's (which authenticates and
// calls Authorize).
func (s *Server) authzServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(s.authzUnary), grpc.ChainStreamInterceptor(s.authzStream)}
}
