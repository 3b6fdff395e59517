//go:build unix

package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	metadatav1 "github.com/meridianmq/meridian/api/metadata/v1"
	"github.com/meridianmq/meridian/region"
	"github.com/meridianmq/meridian/security"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// TestDevClusterSecure: `meridian dev` is secured by default. Its broker,
// bookie and metadata node refuse plaintext and anonymous calls (gRPC
// and HTTP); the control endpoint refuses a call without control.token;
// the CLI without credential flags works through the cluster file
// (cluster.json and control.token 0600), and without the cluster file
// the same command is refused.
func TestDevClusterSecure(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts three processes (-short)")
	}
	dir := t.TempDir()
	cliBinary(t)
	d := startDev(t, dir, "--regions", "a", "--bookies", "1", "--brokers", "1")
	if d.info.CA == "" || d.info.AdminToken == "" || d.info.ControlToken == "" {
		t.Fatalf("cluster.json has no credentials: %+v", d.info)
	}
	for _, f := range []string{filepath.Join(dir, region.DevClusterFile), filepath.Join(dir, region.DevControlTokenFile), d.info.AdminToken} {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, mode %v (want 0600)", f, err, fi.Mode())
		}
	}
	brokerGRPC := d.grpc(t, "a")

	// The CLI with no flags finds the credentials through the cluster
	// file (registered in the test's cache directory).
	if out := d.cli(t, "admin", "--url", brokerGRPC, "tenants", "list"); !strings.Contains(out, "public") {
		t.Fatalf("tenants list through the cluster file: %q", out)
	}
	d.produce(t, "a", "public/default/secure", 3)
	st := d.status(t)
	var meta, bookie string
	for _, p := range st.Processes {
		switch p.Role {
		case region.RoleMeta:
			meta = p.GRPC
		case region.RoleBookie:
			bookie = p.GRPC
		}
	}
	if out := d.cli(t, "admin", "metadata", "status", "--metadata", meta); !strings.Contains(out, "global") {
		t.Fatalf("metadata status through the cluster file: %q", out)
	}

	// Without the cluster file: plaintext to a TLS broker is refused;
	// TLS without a token is anonymous, refused; the flags work.
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	if r := runCLI(t, "", "admin", "--url", brokerGRPC, "--connect-timeout", "3s", "tenants", "list"); r.code == 0 {
		t.Fatalf("plaintext tenants list answered: %q", r.stdout)
	}
	if r := runCLI(t, "", "admin", "--url", brokerGRPC, "--tls-ca", d.info.CA, "tenants", "list"); r.code == 0 || !strings.Contains(strings.ToLower(r.stderr), "authenticat") {
		t.Fatalf("anonymous tenants list: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	if out := d.cli(t, "admin", "--url", brokerGRPC, "--tls-ca", d.info.CA, "--token-file", d.info.AdminToken, "tenants", "list"); !strings.Contains(out, "public") {
		t.Fatalf("tenants list with the flags: %q", out)
	}

	// Every gRPC listener: plaintext fails, anonymous TLS is
	// Unauthenticated.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	anon, err := security.ClientRuntime(security.TLSFiles{CAFile: d.info.CA}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	calls := []struct {
		name, addr string
		call       func(cc *grpc.ClientConn) error
	}{
		{"broker", brokerGRPC, func(cc *grpc.ClientConn) error {
			_, err := clientv1.NewAdminClient(cc).ListTenants(ctx, &clientv1.ListTenantsRequest{})
			return err
		}},
		{"bookie", bookie, func(cc *grpc.ClientConn) error {
			_, err := bookiev1.NewBookieClient(cc).GetInfo(ctx, &bookiev1.GetInfoRequest{})
			return err
		}},
		{"metadata", meta, func(cc *grpc.ClientConn) error {
			_, err := metadatav1.NewMetadataClient(cc).Get(ctx, &metadatav1.GetRequest{Key: "/x"})
			return err
		}},
	}
	for _, c := range calls {
		for _, mode := range []string{"plaintext", "anonymous"} {
			opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
			if mode == "anonymous" {
				opts = anon.DialOptions("")
			}
			cc, err := grpc.NewClient(c.addr, opts...)
			if err != nil {
				t.Fatal(err)
			}
			err = c.call(cc)
			cc.Close()
			if err == nil || (mode == "anonymous" && status.Code(err) != codes.Unauthenticated) {
				t.Fatalf("%s %s call: %v", mode, c.name, err)
			}
		}
	}

	// HTTP: plaintext fails; TLS without a token gets 401 (health probes
	// stay open); the control endpoint wants its token.
	brokerHTTP := d.info.Regions[0].HTTP
	if _, err := probe("http://"+brokerHTTP+"/readyz", 5*time.Second); err == nil {
		t.Fatal("plaintext HTTP answered 200")
	}
	tlsOnly := &http.Client{Transport: anon.HTTPClient(0).Transport, Timeout: 10 * time.Second}
	for path, want := range map[string]int{"/readyz": http.StatusOK, "/metrics": http.StatusUnauthorized} {
		resp, err := tlsOnly.Get("https://" + brokerHTTP + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("anonymous GET %s: %s, want %d", path, resp.Status, want)
		}
	}
	resp, err := tlsOnly.Post("https://"+brokerHTTP+"/admin/v1/ListTenants", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("anonymous admin POST: %s", resp.Status)
	}
	resp, err = http.Get("http://" + d.info.Control + "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("control without the token: %s", resp.Status)
	}
	d.interrupt(t, runningPIDs(t, d.status(t), 3))
}
