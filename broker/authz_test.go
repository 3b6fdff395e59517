package broker_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/region/regiontest"
	"github.com/meridianmq/meridian/security"
	"github.com/meridianmq/meridian/security/securitytest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// authzEnv is one broker with TLS and token auth, superuser "root",
// tenant acme (admin "acme-admin") with namespace acme/ns, tenant other
// (admin "other-admin"), and grants on acme/ns: "prod" produce, "cons"
// consume.
type authzEnv struct {
	t     *testing.T
	env   *securitytest.Env
	addr  string
	addrs []string
	http  string // the first broker's HTTP address
	ca    security.TLSFiles
}

func startAuthz(t *testing.T) *authzEnv { return startAuthzN(t, 1) }

// startAuthzN is startAuthz with n brokers (addrs; addr is the first).
func startAuthzN(t *testing.T, n int) *authzEnv {
	t.Helper()
	env := securitytest.NewEnv(t)
	rc := regiontest.Start(t, regiontest.Options{Brokers: n, Bookies: 1, Broker: func(_ int, c *broker.Config) {
		c.Security = env.Component(security.ComponentRole(security.KindBroker, c.Region))
		c.Security.Superusers = []string{"root"}
	}})
	e := &authzEnv{t: t, env: env, addr: rc.Addrs()[0], addrs: rc.Addrs(), http: rc.Broker(0).HTTPAddr(), ca: env.CA.CAOnly()}
	ctx := context.Background()
	root := e.admin("root")
	for _, tn := range []struct{ tenant, admin string }{{"acme", "acme-admin"}, {"other", "other-admin"}} {
		if _, err := root.CreateTenant(ctx, &clientv1.CreateTenantRequest{Tenant: tn.tenant, AdminRoles: []string{tn.admin}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := root.CreateNamespace(ctx, &clientv1.CreateNamespaceRequest{Namespace: "acme/ns"}); err != nil {
		t.Fatal(err)
	}
	for role, act := range map[string]string{"prod": broker.ActionProduce, "cons": broker.ActionConsume} {
		if _, err := root.GrantPermission(ctx, &clientv1.GrantPermissionRequest{Namespace: "acme/ns", Role: role, Actions: []string{act}}); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// conn dials as role: a token for a user role, a certificate for a
// component role ("kind.region"), nothing for "".
func (e *authzEnv) conn(role string) *grpc.ClientConn { e.t.Helper(); return e.connTo(e.addr, role) }

// connTo dials addr as role (see conn).
func (e *authzEnv) connTo(addr, role string) *grpc.ClientConn {
	e.t.Helper()
	var rt *security.Runtime
	var err error
	switch _, _, comp := security.ParseComponent(role); {
	case role == "":
		rt, err = security.ClientRuntime(e.ca, nil, nil)
	case comp:
		rt, err = security.ClientRuntime(e.env.CA.Files(role), nil, nil)
	default:
		rt, err = security.ClientRuntime(e.ca, security.StaticToken(e.env.Token(role)), nil)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { rt.Close() })
	c, err := grpc.NewClient(addr, rt.DialOptions("")...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

func (e *authzEnv) admin(role string) clientv1.AdminClient {
	return clientv1.NewAdminClient(e.conn(role))
}

// requestFor builds a method's request naming resources of tenant acme
// (a namespace and topics that need not exist: the answer's code tells
// the rule's decision, not the operation's).
func requestFor(t *testing.T, service, method string) (req, resp proto.Message) {
	t.Helper()
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service))
	if err != nil {
		t.Fatal(err)
	}
	md := d.(protoreflect.ServiceDescriptor).Methods().ByName(protoreflect.Name(method))
	mk := func(n protoreflect.FullName) proto.Message {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(n)
		if err != nil {
			t.Fatal(err)
		}
		return mt.New().Interface()
	}
	req, resp = mk(md.Input().FullName()), mk(md.Output().FullName())
	switch r := req.(type) {
	case *clientv1.ProduceRequest:
		r.Kind = &clientv1.ProduceRequest_Open{Open: &clientv1.OpenProducer{Topic: "acme/ns/authz"}}
		return req, resp
	case *clientv1.ConsumeRequest:
		r.Kind = &clientv1.ConsumeRequest_Subscribe{Subscribe: &clientv1.Subscribe{Topic: "acme/ns/authz", Subscription: "s"}}
		return req, resp
	}
	m := req.ProtoReflect()
	for f, v := range map[string]string{"topic": "acme/ns/authz", "namespace": "acme/gone", "prefix": "acme/ns/authz-p/", "tenant": "acme"} {
		if fd := m.Descriptor().Fields().ByName(protoreflect.Name(f)); fd != nil && fd.Kind() == protoreflect.StringKind && !fd.IsList() {
			m.Set(fd, protoreflect.ValueOfString(v))
		}
	}
	// GrantPermission and its kin take exactly one scope.
	if fd := m.Descriptor().Fields().ByName("role"); fd != nil && m.Descriptor().Fields().ByName("prefix") != nil {
		m.Clear(m.Descriptor().Fields().ByName("topic"))
		m.Clear(m.Descriptor().Fields().ByName("prefix"))
	}
	return req, resp
}

// callCode calls a method as conn with req and returns the status code:
// a unary call's, or for a stream the code of the first answer to the
// first message (OK when the stream is still open at the deadline).
func callCode(c *grpc.ClientConn, service string, sd grpc.StreamDesc, unary bool, method string, req, resp proto.Message) codes.Code {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	full := "/" + service + "/" + method
	if unary {
		return status.Code(c.Invoke(ctx, full, req, resp))
	}
	st, err := c.NewStream(ctx, &sd, full)
	if err != nil {
		return status.Code(err)
	}
	if err := st.SendMsg(req); err != nil && !errors.Is(err, io.EOF) {
		return status.Code(err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
	defer rcancel()
	done := make(chan error, 1)
	go func() { done <- st.RecvMsg(resp) }()
	select {
	case err := <-done:
		return status.Code(err)
	case <-rctx.Done():
		return codes.OK // still open: not refused
	}
}

// allowedBy is the role matrix: whether role passes a rule kind (comps:
// the component kinds of a component rule).
func allowedBy(role, kind string, comps []string) bool {
	switch role {
	case "root", security.ComponentRole(security.KindBroker, regiontest.Region):
		return true
	}
	ck, _, isComp := security.ParseComponent(role)
	switch kind {
	case "authenticated":
		return true
	case "component":
		return isComp && slices.Contains(comps, ck)
	case "tenant-admin":
		return role == "acme-admin"
	case "produce":
		return role == "acme-admin" || role == "prod"
	case "consume":
		return role == "acme-admin" || role == "cons"
	case "lookup":
		return role == "acme-admin" || role == "prod" || role == "cons" || (isComp && ck == security.KindBroker)
	}
	return false
}

// TestBrokerRuleTableCoversEveryMethod: every method of the Meridian,
// Admin and Replication services has a rule (a method added without one
// fails here), and every tenant-admin or topic rule's request names its
// resource.
func TestBrokerRuleTableCoversEveryMethod(t *testing.T) {
	// Cluster-wide operations stay superuser-only whatever the table says
	// elsewhere (a tenant admin must never reach them).
	for _, m := range []string{"ListTenants", "CreateTenant", "DeleteTenant", "UpdateTenant", "SetTenantAllowedRegions",
		"ListBrokers", "ListBookies", "GetAutorecoveryStatus", "PauseAutorecovery", "ResumeAutorecovery", "DecommissionBookie",
		"RecommissionBookie", "GetMetadataStatus", "GetMetadataKey", "ListMetadataKeys", "GetLedger", "ListTopicLedgers",
		"ScrubBookie", "SkipLostEntries", "ListRegions", "SetFailoverTarget"} {
		if kind, _ := broker.BrokerRuleKind("/" + clientv1.Admin_ServiceDesc.ServiceName + "/" + m); kind != "superuser" {
			t.Errorf("Admin/%s: rule %q, want superuser", m, kind)
		}
	}
	for _, m := range []string{"Replicate", "ReplicateSubscriptions"} {
		full := "/" + clientv1.Replication_ServiceDesc.ServiceName + "/" + m
		if kind, _ := broker.BrokerRuleKind(full); kind != "component" || !slices.Equal(broker.BrokerRuleComponents(full), []string{security.KindBroker}) {
			t.Errorf("%s: rule %q %v, want component(broker)", full, kind, broker.BrokerRuleComponents(full))
		}
	}
	for _, m := range []string{"Produce", "Consume"} {
		full := "/" + clientv1.Meridian_ServiceDesc.ServiceName + "/" + m
		if kind, first := broker.BrokerRuleKind(full); kind != strings.ToLower(m) || !first {
			t.Errorf("%s: rule %q (first message %v), want %s checked on the first message", full, kind, first, strings.ToLower(m))
		}
	}
	for _, sd := range []grpc.ServiceDesc{clientv1.Meridian_ServiceDesc, clientv1.Admin_ServiceDesc, clientv1.Replication_ServiceDesc} {
		names := []string{}
		for _, m := range sd.Methods {
			names = append(names, m.MethodName)
		}
		for _, s := range sd.Streams {
			names = append(names, s.StreamName)
		}
		for _, n := range names {
			full := "/" + sd.ServiceName + "/" + n
			kind, _ := broker.BrokerRuleKind(full)
			if kind == "" {
				t.Errorf("%s has no authorization rule", full)
				continue
			}
			if kind == "tenant-admin" || kind == "produce" || kind == "consume" || kind == "lookup" {
				req, _ := requestFor(t, sd.ServiceName, n)
				m := req.ProtoReflect()
				found := false
				for _, f := range []string{"topic", "namespace", "prefix", "tenant", "open", "subscribe"} {
					if m.Descriptor().Fields().ByName(protoreflect.Name(f)) != nil {
						found = true
					}
				}
				if !found {
					t.Errorf("%s: rule %s but its request %s names no resource", full, kind, m.Descriptor().FullName())
				}
			}
		}
	}
}

// TestBrokerRoleMatrix calls every RPC of every broker service as each
// role over TLS with tokens or certificates: a call the rules allow gets
// anything but PermissionDenied/Unauthenticated, a call they refuse gets
// PermissionDenied (Unauthenticated for the anonymous caller).
func TestBrokerRoleMatrix(t *testing.T) {
	e := startAuthz(t)
	remote := security.ComponentRole(security.KindBroker, "far")
	local := security.ComponentRole(security.KindBroker, regiontest.Region)
	roles := []string{"acme-admin", "other-admin", "prod", "cons", "nobody", "", remote, "bookie.x", local, "root"}
	for _, role := range roles {
		c := e.conn(role)
		for _, sd := range []grpc.ServiceDesc{clientv1.Meridian_ServiceDesc, clientv1.Admin_ServiceDesc, clientv1.Replication_ServiceDesc} {
			type call struct {
				name  string
				unary bool
				sd    grpc.StreamDesc
			}
			var calls []call
			for _, m := range sd.Methods {
				calls = append(calls, call{name: m.MethodName, unary: true})
			}
			for _, s := range sd.Streams {
				calls = append(calls, call{name: s.StreamName, sd: s})
			}
			for _, cl := range calls {
				full := "/" + sd.ServiceName + "/" + cl.name
				kind, _ := broker.BrokerRuleKind(full)
				req, resp := requestFor(t, sd.ServiceName, cl.name)
				code := callCode(c, sd.ServiceName, cl.sd, cl.unary, cl.name, req, resp)
				refused := code == codes.PermissionDenied || code == codes.Unauthenticated
				switch {
				case role == "":
					if code != codes.Unauthenticated {
						t.Errorf("anonymous %s: %v, want Unauthenticated", full, code)
					}
				case allowedBy(role, kind, broker.BrokerRuleComponents(full)):
					if refused {
						t.Errorf("role %q %s (rule %s): %v, want allowed", role, full, kind, code)
					}
				default:
					if code != codes.PermissionDenied {
						t.Errorf("role %q %s (rule %s): %v, want PermissionDenied", role, full, kind, code)
					}
				}
			}
		}
	}
}

// streamCode opens Produce (produce) or Consume on topic as conn and
// returns the code of the first answer (OK: accepted or still open).
func streamCode(c *grpc.ClientConn, produce bool, topic string) codes.Code {
	sd, name := clientv1.Meridian_ServiceDesc.Streams[0], "Produce"
	var req, resp proto.Message = &clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Open{Open: &clientv1.OpenProducer{Topic: topic}}}, &clientv1.ProduceResponse{}
	if !produce {
		name = "Consume"
		req = &clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Subscribe{Subscribe: &clientv1.Subscribe{Topic: topic, Subscription: "s"}}}
		resp = &clientv1.ConsumeResponse{}
	}
	for _, s := range clientv1.Meridian_ServiceDesc.Streams {
		if s.StreamName == name {
			sd = s
		}
	}
	return callCode(c, clientv1.Meridian_ServiceDesc.ServiceName, sd, false, name, req, resp)
}

// TestPermissionGrantCoverage: a prefix grant covers longer names only; a
// grant on a partitioned topic covers its partitions and not a topic that
// merely starts with its name; a namespace grant covers the namespace
// only; a revoke made through one broker takes effect on another (its
// policy cache learns it).
func TestPermissionGrantCoverage(t *testing.T) {
	e := startAuthzN(t, 2)
	ctx := context.Background()
	root := e.admin("root")
	grant := func(r *clientv1.GrantPermissionRequest) {
		t.Helper()
		if _, err := root.GrantPermission(ctx, r); err != nil {
			t.Fatalf("grant %v: %v", r, err)
		}
	}
	if _, err := root.CreateNamespace(ctx, &clientv1.CreateNamespaceRequest{Namespace: "acme/ns2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := root.CreatePartitionedTopic(ctx, &clientv1.CreatePartitionedTopicRequest{Topic: "acme/ns/pt", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	grant(&clientv1.GrantPermissionRequest{Prefix: "acme/ns/orders-", Role: "shop", Actions: []string{broker.ActionProduce}})
	grant(&clientv1.GrantPermissionRequest{Topic: "acme/ns/pt", Role: "pc", Actions: []string{broker.ActionConsume}})
	grant(&clientv1.GrantPermissionRequest{Namespace: "acme/ns2", Role: "nsp", Actions: []string{broker.ActionProduce}})

	other := e.addrs[1] // grants were written through the first broker
	shop, pc, nsp := e.connTo(other, "shop"), e.connTo(other, "pc"), e.connTo(other, "nsp")
	waitCode := func(what string, want codes.Code, get func() codes.Code) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			got := get()
			if (want == codes.PermissionDenied) == (got == codes.PermissionDenied) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %v, want %v", what, got, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	allowed, refused := codes.OK, codes.PermissionDenied
	waitCode("prefix grant, longer name", allowed, func() codes.Code { return streamCode(shop, true, "acme/ns/orders-eu") })
	waitCode("prefix grant, the prefix itself", refused, func() codes.Code { return streamCode(shop, true, "acme/ns/orders-") })
	waitCode("prefix grant, another name", refused, func() codes.Code { return streamCode(shop, true, "acme/ns/order") })
	waitCode("prefix grant is produce only", refused, func() codes.Code { return streamCode(shop, false, "acme/ns/orders-eu") })
	waitCode("partition of a granted partitioned topic", allowed, func() codes.Code { return streamCode(pc, false, "acme/ns/pt-partition-1") })
	waitCode("the partitioned topic itself", allowed, func() codes.Code { return streamCode(pc, false, "acme/ns/pt") })
	waitCode("a longer name than the granted topic", refused, func() codes.Code { return streamCode(pc, false, "acme/ns/pt2") })
	waitCode("namespace grant", allowed, func() codes.Code { return streamCode(nsp, true, "acme/ns2/x") })
	waitCode("namespace grant elsewhere", refused, func() codes.Code { return streamCode(nsp, true, "acme/ns/x") })

	if _, err := root.RevokePermission(ctx, &clientv1.RevokePermissionRequest{Prefix: "acme/ns/orders-", Role: "shop"}); err != nil {
		t.Fatal(err)
	}
	if _, err := root.RevokePermission(ctx, &clientv1.RevokePermissionRequest{Topic: "acme/ns/pt", Role: "pc"}); err != nil {
		t.Fatal(err)
	}
	waitCode("prefix grant revoked", refused, func() codes.Code { return streamCode(shop, true, "acme/ns/orders-eu") })
	waitCode("topic grant revoked", refused, func() codes.Code { return streamCode(pc, false, "acme/ns/pt-partition-1") })
}

// TestAdminHTTPHardening: on a secured broker the admin JSON API refuses a
// GET on a mutating route (405), a POST without a JSON content type
// (415), a Host that is not an allowed name (421) and a foreign Origin
// (403); it authenticates Authorization: Bearer and applies each method's
// rule (403 when refused, 401 without credentials).
func TestAdminHTTPHardening(t *testing.T) {
	e := startAuthz(t)
	client := func(role string) *http.Client {
		var tok security.TokenSource
		if role != "" {
			tok = security.StaticToken(e.env.Token(role))
		}
		rt, err := security.ClientRuntime(e.ca, tok, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.Close() })
		return rt.HTTPClient(10 * time.Second)
	}
	do := func(c *http.Client, method, path, ctype, body string, edit func(*http.Request)) int {
		t.Helper()
		req, err := http.NewRequest(method, "https://"+e.http+"/admin/v1/"+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		if edit != nil {
			edit(req)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	root, admin, nobody, anon := client("root"), client("acme-admin"), client("nobody"), client("")
	const js = "application/json"
	for _, tc := range []struct {
		name       string
		c          *http.Client
		method     string
		path, ct   string
		body       string
		edit       func(*http.Request)
		wantStatus int
	}{
		{"bearer superuser", root, "POST", "ListTenants", js, `{}`, nil, 200},
		{"bearer superuser, charset", root, "POST", "ListTenants", js + "; charset=utf-8", `{}`, nil, 200},
		{"read route by GET", root, "GET", "ListTenants", "", "", nil, 200},
		{"mutating route by GET", root, "GET", "CreateTenant", "", "", nil, http.StatusMethodNotAllowed},
		{"mutating route by PUT", root, "PUT", "CreateTenant", js, `{"tenant":"x"}`, nil, http.StatusMethodNotAllowed},
		{"form content type", root, "POST", "CreateTenant", "application/x-www-form-urlencoded", `{"tenant":"x"}`, nil, http.StatusUnsupportedMediaType},
		{"text content type", root, "POST", "ListTenants", "text/plain", `{}`, nil, http.StatusUnsupportedMediaType},
		{"no content type", root, "POST", "ListTenants", "", `{}`, nil, http.StatusUnsupportedMediaType},
		{"bad host", root, "POST", "ListTenants", js, `{}`, func(r *http.Request) { r.Host = "evil.example:80" }, http.StatusMisdirectedRequest},
		{"localhost host", root, "POST", "ListTenants", js, `{}`, func(r *http.Request) { r.Host = "localhost:1" }, 200},
		{"foreign origin", root, "POST", "ListTenants", js, `{}`, func(r *http.Request) { r.Header.Set("Origin", "https://evil.example") }, http.StatusForbidden},
		{"own origin", root, "POST", "ListTenants", js, `{}`, func(r *http.Request) { r.Header.Set("Origin", "https://"+e.http) }, 200},
		{"tenant admin, own tenant", admin, "POST", "GetTenant", js, `{"tenant":"acme"}`, nil, 200},
		{"tenant admin, other tenant", admin, "POST", "GetTenant", js, `{"tenant":"other"}`, nil, http.StatusForbidden},
		{"tenant admin, cluster-wide", admin, "POST", "ListBrokers", js, `{}`, nil, http.StatusForbidden},
		{"tenant admin, a request naming two tenants", admin, "POST", "GrantPermission", js,
			`{"namespace":"acme/ns","topic":"other/ns/t","role":"r","actions":["produce"]}`, nil, http.StatusForbidden},
		{"no grants", nobody, "POST", "ListTenants", js, `{}`, nil, http.StatusForbidden},
		{"anonymous", anon, "POST", "ListTenants", js, `{}`, nil, http.StatusUnauthorized},
	} {
		if got := do(tc.c, tc.method, tc.path, tc.ct, tc.body, tc.edit); got != tc.wantStatus {
			t.Errorf("%s: %s %s: %d, want %d", tc.name, tc.method, tc.path, got, tc.wantStatus)
		}
	}
}
