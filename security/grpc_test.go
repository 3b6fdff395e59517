package security_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meridianmq/meridian/security"
	"github.com/meridianmq/meridian/security/securitytest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// recorder is an Authorizer remembering the identities it saw.
type recorder struct {
	mu   sync.Mutex
	seen []security.Identity
	deny string // a role refused
}

func (r *recorder) Authorize(_ context.Context, _ string, id security.Identity) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, id)
	if id.Role == r.deny && r.deny != "" {
		return errors.New("role refused")
	}
	return nil
}

func (r *recorder) last() security.Identity {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[len(r.seen)-1]
}

// serve starts a health service with rt's server options.
func serve(t *testing.T, rt *security.Runtime, auth security.Authorizer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(rt.ServerOptions(auth)...)
	healthpb.RegisterHealthServer(s, health.NewServer())
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

func check(t *testing.T, addr string, opts ...grpc.DialOption) error {
	t.Helper()
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

func watch(t *testing.T, addr string, opts ...grpc.DialOption) error {
	t.Helper()
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := healthpb.NewHealthClient(cc).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	_, err = st.Recv()
	return err
}

func runtime(t *testing.T, c security.Config) *security.Runtime {
	t.Helper()
	rt, err := security.NewRuntime(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

func clientRuntime(t *testing.T, f security.TLSFiles, tok security.TokenSource) *security.Runtime {
	t.Helper()
	rt, err := security.ClientRuntime(f, tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

func TestGRPCAuthentication(t *testing.T) {
	env := securitytest.NewEnv(t)
	rec := &recorder{deny: "mallory"}
	srv := runtime(t, env.Component("broker.a"))
	addr := serve(t, srv, rec)
	caOnly := env.CA.CAOnly()

	for _, tc := range []struct {
		name string
		opts []grpc.DialOption
		code codes.Code
		id   security.Identity
	}{
		{"plaintext", []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, codes.Unavailable, security.Identity{}},
		{"tls without credentials", clientRuntime(t, caOnly, nil).DialOptions(""), codes.Unauthenticated, security.Identity{}},
		{"token", clientRuntime(t, caOnly, security.StaticToken(env.Token("alice"))).DialOptions(""), codes.OK, security.Identity{Role: "alice", Method: security.MethodToken}},
		{"bad token", clientRuntime(t, caOnly, security.StaticToken(securitytest.Token(t, security.GenerateSecretKey(), "alice"))).DialOptions(""), codes.Unauthenticated, security.Identity{}},
		{"component cert", runtime(t, env.Component("bookie.a")).DialOptions(""), codes.OK, security.Identity{Role: "bookie.a", Method: security.MethodTLS}},
		{"refused by the authorizer", clientRuntime(t, caOnly, security.StaticToken(env.Token("mallory"))).DialOptions(""), codes.PermissionDenied, security.Identity{}},
		{"cert of another CA", clientRuntime(t, securitytest.NewCA(t, "other").Files("x"), nil).DialOptions(""), codes.Unavailable, security.Identity{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for kind, call := range map[string]func(*testing.T, string, ...grpc.DialOption) error{"unary": check, "stream": watch} {
				err := call(t, addr, tc.opts...)
				if status.Code(err) != tc.code {
					t.Fatalf("%s: %v, want %v", kind, err, tc.code)
				}
				if tc.code == codes.OK && rec.last() != tc.id {
					t.Fatalf("%s: identity %+v, want %+v", kind, rec.last(), tc.id)
				}
			}
		})
	}
}

// TestGRPCOff: with security off the options are plaintext and every call
// passes anonymously.
func TestGRPCOff(t *testing.T) {
	rt := runtime(t, security.Config{})
	if n := len(rt.ServerOptions(nil)); n != 0 {
		t.Fatalf("%d server options with security off", n)
	}
	addr := serve(t, rt, nil)
	if err := check(t, addr, rt.DialOptions("")...); err != nil {
		t.Fatal(err)
	}
	var nilRT *security.Runtime
	if err := check(t, addr, nilRT.DialOptions("")...); err != nil {
		t.Fatal(err)
	}
}

// TestGRPCTLSWithoutAuth: TLS on and auth off admits anonymous callers
// and still names certificate holders.
func TestGRPCTLSWithoutAuth(t *testing.T) {
	ca := securitytest.NewCA(t, "ca")
	rec := &recorder{}
	addr := serve(t, runtime(t, security.Config{TLS: ca.Files("metadata.a")}), rec)
	if err := check(t, addr, clientRuntime(t, ca.CAOnly(), nil).DialOptions("")...); err != nil {
		t.Fatal(err)
	}
	if id := rec.last(); !id.Anonymous() {
		t.Fatalf("identity %+v, want anonymous", id)
	}
	if err := check(t, addr, runtime(t, security.Config{TLS: ca.Files("broker.a")}).DialOptions("")...); err != nil {
		t.Fatal(err)
	}
	if id := rec.last(); id.Role != "broker.a" || id.Method != security.MethodTLS {
		t.Fatalf("identity %+v", id)
	}
	// With auth off a token is ignored: the certificate names the caller.
	if err := check(t, addr, clientRuntime(t, ca.Files("bookie.a"), security.StaticToken("whatever")).DialOptions("")...); err != nil {
		t.Fatal(err)
	}
	if id := rec.last(); id.Role != "bookie.a" || id.Method != security.MethodTLS {
		t.Fatalf("identity with an ignored token %+v", id)
	}
}

// TestTLSRotation rotates the CA then the leaf certificates while a
// client dials again and again: a new CA is added to both sides' bundles,
// then both sides get certificates of the new CA, then the old CA is
// removed. No side restarts.
func TestTLSRotation(t *testing.T) {
	oldCA := securitytest.NewCA(t, "old")
	newCA := securitytest.NewCA(t, "new")
	srvFiles, cliFiles := oldCA.Files("broker.a"), oldCA.Files("bookie.a")
	srv := runtime(t, security.Config{TLS: srvFiles, ReloadPollInterval: time.Second})
	cli := runtime(t, security.Config{TLS: cliFiles, ReloadPollInterval: time.Second})
	rec := &recorder{}
	addr := serve(t, srv, rec)
	if err := check(t, addr, cli.DialOptions("")...); err != nil {
		t.Fatal(err)
	}
	// A client trusting only the new CA cannot connect yet.
	newOnly := clientRuntime(t, newCA.CAOnly(), nil)
	if err := check(t, addr, newOnly.DialOptions("")...); err == nil {
		t.Fatal("new-CA-only client connected before the rotation")
	}
	for _, f := range []security.TLSFiles{srvFiles, cliFiles} {
		securitytest.WriteBundle(t, f.CAFile, oldCA, newCA)
	}
	securitytest.WriteLeaf(t, srvFiles, newCA.Issue("broker.a"))
	waitFor(t, "server certificate of the new CA", func() bool { return check(t, addr, newOnly.DialOptions("")...) == nil })
	securitytest.WriteLeaf(t, cliFiles, newCA.Issue("bookie.a"))
	for _, f := range []security.TLSFiles{srvFiles, cliFiles} {
		securitytest.WriteBundle(t, f.CAFile, newCA)
	}
	waitFor(t, "client certificate of the new CA accepted after the old CA left", func() bool {
		if check(t, addr, cli.DialOptions("")...) != nil {
			return false
		}
		id := rec.last()
		return id.Role == "bookie.a" && srv.TLS().Pool().Equal(cli.TLS().Pool())
	})
	// An old-CA certificate is now refused.
	stale := runtime(t, security.Config{TLS: oldCA.Files("bookie.a")})
	if err := check(t, addr, stale.DialOptions("")...); err == nil {
		t.Fatal("old-CA certificate accepted after the old CA was removed")
	}
}

// TestTLSInvalidKeepsOld: a broken certificate file is refused and counted;
// the previous certificate keeps serving.
func TestTLSInvalidKeepsOld(t *testing.T) {
	ca := securitytest.NewCA(t, "ca")
	f := ca.Files("broker.a")
	srv := runtime(t, security.Config{TLS: f})
	before := srv.TLS().NotAfter()
	securitytest.WriteFile(t, f.CertFile, []byte("-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n"))
	waitFor(t, "invalid certificate refused", func() bool { return srv.TLS().ReloadFailures() > 0 })
	addr := serve(t, srv, nil)
	if err := check(t, addr, clientRuntime(t, ca.CAOnly(), nil).DialOptions("")...); err != nil {
		t.Fatalf("old certificate not kept: %v", err)
	}
	if srv.TLS().NotAfter() != before {
		t.Fatal("material changed")
	}
}

// TestTLSKubernetesSymlinkSwap updates the files the way a Kubernetes
// Secret volume does: the files are symlinks through ..data, and the
// update renames a new ..data symlink over the old one.
func TestTLSKubernetesSymlinkSwap(t *testing.T) {
	ca := securitytest.NewCA(t, "ca")
	dir := t.TempDir()
	writeGen := func(name string, l securitytest.Leaf) {
		g := filepath.Join(dir, name)
		if err := os.Mkdir(g, 0o700); err != nil {
			t.Fatal(err)
		}
		for f, b := range map[string][]byte{"ca.pem": ca.PEM, "cert.pem": l.CertPEM, "key.pem": l.KeyPEM} {
			if err := os.WriteFile(filepath.Join(g, f), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink(name, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	writeGen("..gen1", ca.Issue("broker.a"))
	for _, f := range []string{"ca.pem", "cert.pem", "key.pem"} {
		if err := os.Symlink(filepath.Join("..data", f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	files := security.TLSFiles{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem")}
	tl, err := security.LoadTLS(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	first := tl.NotAfter()
	writeGen("..gen2", ca.IssueValid("broker.a", time.Now().Add(-time.Hour), time.Now().Add(48*time.Hour)))
	waitFor(t, "swapped certificate loaded", func() bool { return !tl.NotAfter().Equal(first) })
}

func TestHTTPHandler(t *testing.T) {
	env := securitytest.NewEnv(t)
	srv := runtime(t, env.Component("broker.a"))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got security.Identity
	h := srv.HTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = security.IdentityFrom(r.Context())
		mu.Unlock()
	}), "/healthz")
	hs := &http.Server{Handler: h}
	go hs.Serve(srv.HTTPListener(lis))
	defer hs.Close()
	base := "https://" + lis.Addr().String()
	get := func(c *http.Client, path string) int {
		t.Helper()
		resp, err := c.Get(base + path)
		if err != nil {
			return -1
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	anon := clientRuntime(t, env.CA.CAOnly(), nil).HTTPClient(5 * time.Second)
	if c := get(anon, "/admin"); c != http.StatusUnauthorized {
		t.Fatalf("anonymous: %d", c)
	}
	if c := get(anon, "/healthz"); c != http.StatusOK {
		t.Fatalf("public path: %d", c)
	}
	if c := get(clientRuntime(t, env.CA.CAOnly(), security.StaticToken(env.Token("alice"))).HTTPClient(5*time.Second), "/admin"); c != http.StatusOK {
		t.Fatalf("token: %d", c)
	}
	mu.Lock()
	if got.Role != "alice" || got.Method != security.MethodToken {
		t.Fatalf("identity %+v", got)
	}
	mu.Unlock()
	if c := get(runtime(t, env.Component("metadata.a")).HTTPClient(5*time.Second), "/admin"); c != http.StatusOK {
		t.Fatalf("cert: %d", c)
	}
	mu.Lock()
	if got.Role != "metadata.a" || got.Method != security.MethodTLS {
		t.Fatalf("identity %+v", got)
	}
	mu.Unlock()
	if c := get(http.DefaultClient, "/admin"); c != -1 && c != http.StatusBadRequest {
		t.Fatalf("plaintext HTTP: %d", c)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		c     security.Config
		field string
	}{
		{security.Config{Auth: security.AuthConfig{Enabled: true}}, "security.auth.enabled requires security.tls"},
		{security.Config{TLS: security.TLSFiles{CAFile: "ca"}}, "security.tls.cert_file"},
		{security.Config{TLS: security.TLSFiles{CertFile: "c", KeyFile: "k"}}, "security.tls.ca_file"},
		{security.Config{TLS: security.TLSFiles{CAFile: "a", CertFile: "c", KeyFile: "k"}, Auth: security.AuthConfig{Enabled: true}}, "security.auth.keys.secret_key_file"},
		{security.Config{TokenFile: "t"}, "security.token_file"},
		{security.Config{Auth: security.AuthConfig{Keys: security.TokenKeys{SecretKeyFile: "s"}}}, "security.auth.enabled is false"},
	} {
		if err := tc.c.Validate(); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: %v, want an error naming %s", tc.c, err, tc.field)
		}
	}
	if err := (security.Config{}).Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestCheckExposure(t *testing.T) {
	var warned []string
	log := newCaptureLogger(&warned)
	env := securitytest.NewEnv(t)
	secured := env.Component("broker.a")
	for _, tc := range []struct {
		listen string
		c      security.Config
		ok     bool
	}{
		{"127.0.0.1:6650", security.Config{}, true},
		{"localhost:6650", security.Config{}, true},
		{"[::1]:6650", security.Config{}, true},
		{"0.0.0.0:6650", security.Config{}, false},
		{":6650", security.Config{}, false},
		{"10.0.0.1:6650", security.Config{TLS: secured.TLS}, false},
		{"10.0.0.1:6650", secured, true},
		{"", security.Config{}, true},
	} {
		err := security.CheckExposure("broker.grpc_address", tc.listen, tc.c, log)
		if (err == nil) != tc.ok {
			t.Errorf("%q: %v", tc.listen, err)
		}
		if err != nil && (!errors.Is(err, security.ErrExposed) || !strings.Contains(err.Error(), "broker.grpc_address") || !strings.Contains(err.Error(), "security.auth.enabled")) {
			t.Errorf("%q: error does not name the fields: %v", tc.listen, err)
		}
	}
	if len(warned) != 0 {
		t.Fatalf("warned without insecure: %v", warned)
	}
	if err := security.CheckExposure("broker.grpc_address", "0.0.0.0:6650", security.Config{Insecure: true}, log); err != nil {
		t.Fatal(err)
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "INSECURE") {
		t.Fatalf("insecure: warnings %v", warned)
	}
}

func TestGossipKeys(t *testing.T) {
	k1, k2 := security.GenerateGossipKey(), security.GenerateGossipKey()
	keys, err := security.ParseGossipKeys([]byte("# primary first\n" + k1 + "\n\n" + k2 + "\n"))
	if err != nil || len(keys) != 2 || len(keys[0]) != 32 {
		t.Fatalf("%d keys, %v", len(keys), err)
	}
	for _, bad := range []string{"", "not base64!", "AAAA"} {
		if _, err := security.ParseGossipKeys([]byte(bad)); !errors.Is(err, security.ErrGossipKeys) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestComponentRole(t *testing.T) {
	r := security.ComponentRole(security.KindBroker, "eu-west")
	if k, reg, ok := security.ParseComponent(r); !ok || k != "broker" || reg != "eu-west" {
		t.Fatalf("%q: %q %q %v", r, k, reg, ok)
	}
	for _, bad := range []string{"alice", "broker.", "proxy.a", ".a"} {
		if _, _, ok := security.ParseComponent(bad); ok {
			t.Errorf("%q parsed as a component", bad)
		}
	}
}
