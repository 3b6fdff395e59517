package region

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	metadatav1 "github.com/meridianmq/meridian/api/metadata/v1"
	"github.com/meridianmq/meridian/client"
	"github.com/meridianmq/meridian/region/regiontest"
	"github.com/meridianmq/meridian/security"
	"github.com/meridianmq/meridian/security/securitytest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// startSecureRegion starts a region with TLS and token auth on every
// component: each has a certificate for its component role
// (<kind>.test) from env's CA, and tokens are HS256 with env's key.
// "alice" is a superuser (authorization: every component's
// security.superusers).
func startSecureRegion(t *testing.T, env *securitytest.Env, opts regiontest.Options) *regiontest.Cluster {
	t.Helper()
	opts.Security = func(kind string, _ int) security.Config {
		c := env.Component(security.ComponentRole(kind, regiontest.Region))
		c.Superusers = []string{"alice"}
		return c
	}
	return regiontest.Start(t, opts)
}

// grpcCall makes one cheap call on a gRPC listener with the given dial
// options and returns its error.
type grpcCall func(ctx context.Context, cc *grpc.ClientConn) error

// TestSecurityEveryListener: with security on, every listener of a
// region (broker gRPC and HTTP, bookie gRPC and HTTP, metadata gRPC and
// HTTP, the Raft transport) refuses plaintext, refuses a TLS connection
// without credentials (Unauthenticated / 401 / no handshake), and serves
// a valid token or component certificate.
func TestSecurityEveryListener(t *testing.T) {
	env := securitytest.NewEnv(t)
	c := startSecureRegion(t, env, regiontest.Options{Brokers: 1, Bookies: 1})
	node := c.Meta.Node(0)

	anon := clientSec(t, env.CA.CAOnly(), nil)
	withToken := clientSec(t, env.CA.CAOnly(), security.StaticToken(env.Token("alice")))
	withCert := clientSec(t, env.CA.Files("broker.test"), nil) // a component every listener serves
	badToken := clientSec(t, env.CA.CAOnly(), security.StaticToken(securitytest.Token(t, security.GenerateSecretKey(), "alice")))

	grpcListeners := []struct {
		name string
		addr string
		call grpcCall
	}{
		{"broker gRPC", c.Broker(0).Addr(), func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := clientv1.NewAdminClient(cc).ListTenants(ctx, &clientv1.ListTenantsRequest{})
			return err
		}},
		{"broker gRPC stream", c.Broker(0).Addr(), func(ctx context.Context, cc *grpc.ClientConn) error {
			st, err := clientv1.NewMeridianClient(cc).Produce(ctx)
			if err != nil {
				return err
			}
			_, err = st.Recv() // the refusal arrives on the stream
			if status.Code(err) == codes.DeadlineExceeded {
				return nil // accepted: the broker waits for the open
			}
			return err
		}},
		{"bookie gRPC", c.Bookies.Addr(0), func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := bookiev1.NewBookieClient(cc).GetInfo(ctx, &bookiev1.GetInfoRequest{})
			return err
		}},
		{"metadata gRPC", node.GRPCAddr(), func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := metadatav1.NewMetadataClient(cc).Status(ctx, &metadatav1.StatusRequest{})
			return err
		}},
	}
	for _, l := range grpcListeners {
		t.Run(l.name, func(t *testing.T) {
			for _, tc := range []struct {
				name string
				opts []grpc.DialOption
				code codes.Code
			}{
				{"plaintext", []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, codes.Unavailable},
				{"tls without credentials", anon.DialOptions(""), codes.Unauthenticated},
				{"tls with a bad token", badToken.DialOptions(""), codes.Unauthenticated},
				{"token", withToken.DialOptions(""), codes.OK},
				{"component certificate", withCert.DialOptions(""), codes.OK},
			} {
				cc, err := grpc.NewClient(l.addr, tc.opts...)
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				err = l.call(ctx, cc)
				cancel()
				cc.Close()
				if got := status.Code(err); got != tc.code {
					t.Errorf("%s: %v (code %v), want %v", tc.name, err, got, tc.code)
				}
			}
		})
	}

	httpListeners := []struct{ name, addr, path string }{
		{"broker HTTP", c.Broker(0).HTTPAddr(), "/metrics"},
		{"bookie HTTP", c.Bookies.Server(0).HTTPAddr(), "/metrics"},
		{"metadata HTTP", node.HTTPAddr(), "/status"},
	}
	for _, l := range httpListeners {
		t.Run(l.name, func(t *testing.T) {
			if l.addr == "" {
				t.Fatal("no HTTP listener")
			}
			// Plaintext HTTP to a TLS listener gets no answer of the
			// server's (Go's TLS listener answers 400 to a plain request).
			if code := httpGet(t, http.DefaultClient, "http://"+l.addr+l.path); code == http.StatusOK {
				t.Errorf("plaintext: %d", code)
			}
			for _, tc := range []struct {
				name string
				rt   *security.Runtime
				want int
			}{
				{"tls without credentials", anon, http.StatusUnauthorized},
				{"tls with a bad token", badToken, http.StatusUnauthorized},
				{"token", withToken, http.StatusOK},
				{"component certificate", withCert, http.StatusOK},
			} {
				if code := httpGet(t, tc.rt.HTTPClient(5*time.Second), "https://"+l.addr+l.path); code != tc.want {
					t.Errorf("%s: %d, want %d", tc.name, code, tc.want)
				}
			}
			// Health probes stay open.
			if code := httpGet(t, anon.HTTPClient(5*time.Second), "https://"+l.addr+"/healthz"); code != http.StatusOK {
				t.Errorf("/healthz without credentials: %d", code)
			}
		})
	}

	t.Run("Raft transport", func(t *testing.T) {
		raft := node.Config().RaftAddress
		// Plaintext: the preamble of a Raft connection gets the
		// connection closed, never an answer.
		pc, err := net.DialTimeout("tcp", raft, 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = pc.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = pc.Write([]byte("MRT1\x01"))
		if _, err := pc.Read(make([]byte, 1)); err == nil {
			t.Error("plaintext Raft connection answered")
		}
		pc.Close()
		for _, tc := range []struct {
			name string
			rt   *security.Runtime
			ok   bool
		}{
			{"tls without a certificate", anon, false},
			{"a component that is not a metadata node", withCert, false},
			{"a metadata node's certificate", clientSec(t, env.CA.Files("metadata.test"), nil), true},
		} {
			err := raftHandshake(raft, tc.rt)
			if (err == nil) != tc.ok {
				t.Errorf("%s: %v", tc.name, err)
			}
		}
	})

	t.Run("client", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		// Without credentials the producer is refused, not retried.
		cl, err := client.New(ctx, client.Options{URL: c.Broker(0).Addr(), TLSFiles: env.CA.CAOnly()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cl.NewProducer(ctx, client.ProducerOptions{Topic: "public/default/sec"}); !errors.Is(err, client.ErrUnauthenticated) {
			t.Fatalf("producer without credentials: %v, want ErrUnauthenticated", err)
		}
		_ = cl.Close(ctx)
		if _, err := client.New(ctx, client.Options{URL: c.Broker(0).Addr(), Token: "x"}); !errors.Is(err, client.ErrInvalidArgument) {
			t.Fatalf("a token without TLS: %v", err)
		}
		cl, err = client.New(ctx, client.Options{URL: c.Broker(0).Addr(), TLSFiles: env.CA.CAOnly(), Token: env.Token("alice")})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close(ctx)
		co, err := cl.Subscribe(ctx, client.ConsumerOptions{Topic: "public/default/sec", Subscription: "s", InitialPosition: client.Earliest})
		if err != nil {
			t.Fatal(err)
		}
		p, err := cl.NewProducer(ctx, client.ProducerOptions{Topic: "public/default/sec"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Send(ctx, &client.Message{Payload: []byte("secret")}); err != nil {
			t.Fatal(err)
		}
		m, err := co.Receive(ctx)
		if err != nil || string(m.Payload) != "secret" {
			t.Fatalf("receive: %v %v", m, err)
		}
	})
}

func clientSec(t *testing.T, f security.TLSFiles, tok security.TokenSource) *security.Runtime {
	t.Helper()
	rt, err := security.ClientRuntime(f, tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

// httpGet returns the status of a GET (-1 when the request failed).
func httpGet(t *testing.T, c *http.Client, url string) int {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		return -1
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// raftHandshake opens a TLS connection to a Raft listener as rt and
// reports whether the listener kept it: a refused client certificate ends
// the connection right after the handshake.
func raftHandshake(addr string, rt *security.Runtime) error {
	raw, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return err
	}
	defer raw.Close()
	tc := tls.Client(raw, rt.TLS().ClientConfig(security.ServerNameOf(addr)))
	_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err != nil {
		return err
	}
	// An accepted peer is read from until it sends a preamble: the read
	// times out. A refused one is closed (EOF or a TLS alert).
	// (2 s: a refusal comes right after the handshake; the wait only
	// bounds the accepted case.)
	_ = tc.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err = tc.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil
	}
	return errors.New("connection closed by the Raft listener: " + errString(err))
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
