package security_test

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/meridianmq/meridian/security"
	"github.com/meridianmq/meridian/security/securitytest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

// TestInProcessListener: a server with TLS and auth on serves an
// in-memory listener without a handshake, authenticating its dialer as the
// listener's role, while its TCP listener still refuses anything but TLS
// with credentials.
func TestInProcessListener(t *testing.T) {
	env := securitytest.NewEnv(t)
	rec := &recorder{}
	srv := runtime(t, env.Component("bookie.a"))
	s := grpc.NewServer(srv.ServerOptions(rec)...)
	healthpb.RegisterHealthServer(s, health.NewServer())
	mem := bufconn.Listen(1 << 20)
	go s.Serve(security.InProcessListener(mem, "broker.a"))
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(tcp)
	t.Cleanup(s.Stop)

	memDial := grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
		c, err := mem.DialContext(ctx)
		if err != nil {
			return nil, err
		}
		return security.InProcessConn(c), nil
	})
	// The dialer's own credentials (a broker's TLS runtime) skip the
	// handshake on the marked connection.
	client := runtime(t, env.Component("broker.a"))
	for kind, call := range map[string]func(*testing.T, string, ...grpc.DialOption) error{"unary": check, "stream": watch} {
		if err := call(t, "passthrough:///bookie", append(client.DialOptions("bookie"), memDial)...); err != nil {
			t.Fatalf("%s in-process: %v", kind, err)
		}
		if id := rec.last(); id != (security.Identity{Role: "broker.a", Method: security.MethodInProcess}) {
			t.Fatalf("%s in-process identity %+v", kind, id)
		}
	}
	// The same server's socket: TLS is still required, and an unmarked
	// connection never gets the in-process identity.
	if err := check(t, tcp.Addr().String(), clientRuntime(t, env.CA.CAOnly(), nil).DialOptions("")...); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("tcp without credentials: %v, want Unauthenticated", err)
	}
	if err := check(t, tcp.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials())); status.Code(err) != codes.Unavailable {
		t.Fatalf("tcp plaintext: %v, want Unavailable", err)
	}
}

// TestCheckCertificateRole: a component must present its own
// certificate; the error names the field, the CN found and the one wanted.
func TestCheckCertificateRole(t *testing.T) {
	env := securitytest.NewEnv(t)
	rt := runtime(t, env.Component("broker.a"))
	if err := rt.CheckCertificateRole("f", security.KindBroker, "a"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ kind, region, want string }{
		{security.KindBroker, "b", `f: the certificate's subject CN is "broker.a"; a broker must present "broker.b"`},
		{security.KindBookie, "a", `a bookie must present "bookie.a"`},
		{security.KindMetadata, "", `a metadata must present "metadata.<region>"`},
	} {
		if err := rt.CheckCertificateRole("f", tc.kind, tc.region); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s.%s: %v, want %q", tc.kind, tc.region, err, tc.want)
		}
	}
	if err := runtime(t, env.Component("metadata.x")).CheckCertificateRole("f", security.KindMetadata, ""); err != nil {
		t.Fatal(err)
	}
	// No certificate (a CA only) or no TLS: nothing to check.
	if err := clientRuntime(t, env.CA.CAOnly(), nil).CheckCertificateRole("f", security.KindBroker, "a"); err != nil {
		t.Fatal(err)
	}
	var off *security.Runtime
	if err := off.CheckCertificateRole("f", security.KindBroker, "a"); err != nil {
		t.Fatal(err)
	}
}
