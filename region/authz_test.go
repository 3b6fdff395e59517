package region

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	metadatav1 "github.com/meridianmq/meridian/api/metadata/v1"
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

// TestComponentServicesRoleMatrix calls every method of the Bookie and
// Metadata services, as each identity, on a secured region: the bookie
// serves brokers, autorecovery and bookies (superusers: GetInfo and Scrub
// only); the metadata service serves components (superusers: Get, List,
// Watch, Status only); users without superuser, and the anonymous, are
// refused. Methods come from the generated ServiceDescs, so a method
// added later is called too (and refused: it has no rule).
func TestComponentServicesRoleMatrix(t *testing.T) {
	env := securitytest.NewEnv(t)
	c := startSecureRegion(t, env, regiontest.Options{Brokers: 1, Bookies: 1})
	caOnly := env.CA.CAOnly()
	ids := map[string]*security.Runtime{
		"alice (superuser)": clientSec(t, caOnly, security.StaticToken(env.Token("alice"))),
		"nobody":            clientSec(t, caOnly, security.StaticToken(env.Token("nobody"))),
		"anonymous":         clientSec(t, caOnly, nil),
	}
	for _, k := range []string{security.KindBroker, security.KindBookie, security.KindAutorecovery, security.KindMetadata} {
		ids[k] = clientSec(t, env.CA.Files(security.ComponentRole(k, regiontest.Region)), nil)
	}
	bookieReads := map[string]bool{"GetInfo": true, "Scrub": true}
	metaReads := map[string]bool{"Get": true, "List": true, "Watch": true, "Status": true}
	services := []struct {
		sd    grpc.ServiceDesc
		addr  string
		allow func(id, method string) bool
	}{
		{bookiev1.Bookie_ServiceDesc, c.Bookies.Addr(0), func(id, m string) bool {
			switch id {
			case security.KindBroker, security.KindBookie, security.KindAutorecovery:
				return true
			case "alice (superuser)":
				return bookieReads[m]
			}
			return false
		}},
		{metadatav1.Metadata_ServiceDesc, c.Meta.Node(0).GRPCAddr(), func(id, m string) bool {
			switch id {
			case security.KindBroker, security.KindBookie, security.KindAutorecovery, security.KindMetadata:
				return true
			case "alice (superuser)":
				return metaReads[m]
			}
			return false
		}},
	}
	for name, rt := range ids {
		for _, svc := range services {
			cc, err := grpc.NewClient(svc.addr, rt.DialOptions("")...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cc.Close() })
			check := func(method string, code codes.Code) {
				t.Helper()
				refused := code == codes.PermissionDenied || code == codes.Unauthenticated
				switch {
				case name == "anonymous":
					if code != codes.Unauthenticated {
						t.Errorf("anonymous %s/%s: %v, want Unauthenticated", svc.sd.ServiceName, method, code)
					}
				case svc.allow(name, method):
					if refused {
						t.Errorf("%s %s/%s: %v, want allowed", name, svc.sd.ServiceName, method, code)
					}
				case code != codes.PermissionDenied:
					t.Errorf("%s %s/%s: %v, want PermissionDenied", name, svc.sd.ServiceName, method, code)
				}
			}
			for _, m := range svc.sd.Methods {
				req, resp := emptyMessages(t, svc.sd.ServiceName, m.MethodName)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := cc.Invoke(ctx, "/"+svc.sd.ServiceName+"/"+m.MethodName, req, resp)
				cancel()
				check(m.MethodName, status.Code(err))
			}
			for _, s := range svc.sd.Streams {
				req, resp := emptyMessages(t, svc.sd.ServiceName, s.StreamName)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				code := codes.OK
				st, err := cc.NewStream(ctx, &s, "/"+svc.sd.ServiceName+"/"+s.StreamName)
				if err == nil {
					_ = st.SendMsg(req)
					_ = st.CloseSend()
					err = st.RecvMsg(resp)
				}
				if c := status.Code(err); c != codes.DeadlineExceeded { // still open at the deadline: accepted
					code = c
				}
				cancel()
				check(s.StreamName, code)
			}
		}
	}

	// HTTP: GET routes for any authenticated identity, POST for
	// components and superusers only.
	nobody := ids["nobody"].HTTPClient(5 * time.Second)
	for _, url := range []string{"https://" + c.Meta.Node(0).HTTPAddr() + "/debug/clock"} {
		resp, err := nobody.Post(url, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("nobody POST %s: %d, want 403", url, resp.StatusCode)
		}
	}
}

// emptyMessages returns empty request and response messages of a method.
func emptyMessages(t *testing.T, service, method string) (req, resp proto.Message) {
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
	return mk(md.Input().FullName()), mk(md.Output().FullName())
}
