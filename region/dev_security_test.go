//go:build unix

package region

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meridianmq/meridian/chaos"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/security"
)

// devForSecurity lays out a cluster, sets its security up and writes its
// configs (nothing started).
func devForSecurity(t *testing.T, insecure bool) *Dev {
	t.Helper()
	cfg := devTestConfig(t.TempDir())
	cfg.Insecure = insecure
	plan, err := newDevPlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	plan.closeListeners() // as after the process that picked them exited
	log := slog.New(slog.DiscardHandler)
	d := &Dev{cfg: cfg, plan: plan, log: log, net: chaos.NewNetwork(log)}
	t.Cleanup(func() { d.Stop(context.Background()) })
	if err := d.setupSecurity(); err != nil {
		t.Fatal(err)
	}
	if err := d.writeConfigs(); err != nil {
		t.Fatal(err)
	}
	return d
}

// A dev cluster is secured by default: a certificate per component role
// of every region, every process's config with TLS, token auth and the
// admin superuser, the brokers' gossip encrypted, https readiness, the
// cluster file naming the CA and the admin token. --insecure writes the
// configs as before.
func TestDevSecuredConfigs(t *testing.T) {
	d := devForSecurity(t, false)
	dir := d.cfg.DataDir
	for _, r := range d.cfg.Regions {
		for _, k := range devComponentKinds {
			f := d.sec.Files(security.ComponentRole(k, r))
			for _, p := range []string{f.CertFile, f.KeyFile} {
				fi, err := os.Stat(p)
				if err != nil || fi.Mode().Perm() != 0o600 {
					t.Fatalf("%s: %v, mode %v (want 0600)", p, err, fi.Mode())
				}
			}
		}
	}
	mc, err := metadata.LoadNodeConfig(filepath.Join(dir, "b", "meta-0.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !mc.Security.Enabled() || !mc.Security.Auth.Enabled || mc.Security.TLS.CertFile != d.sec.Files("metadata.b").CertFile ||
		len(mc.Security.Superusers) != 1 || mc.Security.Superusers[0] != security.AdminRole {
		t.Fatalf("b/meta-0 security: %+v", mc.Security)
	}
	for name, want := range map[string][]string{
		"a/bookie-1.yaml": {"cert_file: " + d.sec.Files("bookie.a").CertFile, "secret_key_file: " + d.sec.SecretKey, "enabled: true"},
		"c/broker-0.yaml": {"cert_file: " + d.sec.Files("broker.c").CertFile, "secret_key_file: " + d.sec.SecretKey, "gossip_key_file: " + filepath.Join(dir, DevSecurityDir, devGossipKeyFile), "- admin"},
	} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !strings.Contains(string(b), w) {
				t.Fatalf("%s lacks %q:\n%s", name, w, b)
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, DevSecurityDir, devGossipKeyFile)); err != nil {
		t.Fatal(err)
	} else if keys, err := security.ParseGossipKeys(b); err != nil || len(keys) != 1 {
		t.Fatalf("gossip key: %v %v", keys, err)
	}
	if u := d.procs[0].p.Spec().ReadyURL; !strings.HasPrefix(u, "https://") {
		t.Fatalf("ready URL %s", u)
	}
	info := d.Info()
	if info.CA != d.sec.CA || info.AdminToken != d.sec.AdminToken || info.ControlToken != filepath.Join(dir, DevControlTokenFile) ||
		!info.HasAddress(d.plan.Regions[2].Brokers[1].GRPC) ||
		!info.HasAddress(strings.Replace(d.plan.Regions[1].Brokers[0].HTTP, "127.0.0.1", "localhost", 1)) || !info.HasAddress(d.plan.Regions[0].Meta[0].GRPC) || info.HasAddress("127.0.0.1:1") {
		t.Fatalf("cluster info %+v", info)
	}
	if f, tok := info.Credentials(); f.CAFile != d.sec.CA || tok != d.sec.AdminToken {
		t.Fatalf("credentials %+v %s", f, tok)
	}

	// A restart reuses the credentials.
	ca, _ := os.ReadFile(d.sec.CA)
	again := &Dev{cfg: d.cfg, plan: d.plan, log: d.log}
	if err := again.setupSecurity(); err != nil {
		t.Fatal(err)
	}
	defer again.rt.Close()
	if ca2, _ := os.ReadFile(again.sec.CA); string(ca2) != string(ca) || again.ctlToken != d.ctlToken {
		t.Fatal("a restart changed the CA or the control token")
	}

	off := devForSecurity(t, true)
	for _, name := range []string{"a/meta-0.yaml", "a/bookie-0.yaml", "a/broker-0.yaml"} {
		b, err := os.ReadFile(filepath.Join(off.cfg.DataDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "security") || strings.Contains(string(b), "gossip_key_file") {
			t.Fatalf("--insecure: %s has security:\n%s", name, b)
		}
	}
	if _, err := os.Stat(filepath.Join(off.cfg.DataDir, DevSecurityDir)); err == nil {
		t.Fatal("--insecure provisioned credentials")
	}
	if info := off.Info(); info.CA != "" || info.AdminToken != "" {
		t.Fatalf("--insecure cluster info %+v", info)
	}
}

// The control endpoint refuses a call without the token of
// control.token (0600), or with another, with 401; the client of the
// cluster file presents it.
func TestDevControlRequiresToken(t *testing.T) {
	for _, insecure := range []bool{false, true} {
		d := devForSecurity(t, insecure)
		d.plan.Control = "127.0.0.1:0"
		if err := d.startControl(); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(d.cfg.DataDir, DevControlTokenFile)
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", path, err, fi)
		}
		url := "http://" + d.ctlLis.Addr().String() + "/v1/status"
		for _, auth := range []string{"", "Bearer ", "Bearer wrong", d.ctlToken, "Basic " + d.ctlToken} {
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("insecure=%v, Authorization %q: %s, want 401", insecure, auth, resp.Status)
			}
		}
		for _, op := range []string{"link", "process", "disk", "clock", "region"} {
			resp, err := http.Post("http://"+d.ctlLis.Addr().String()+"/v1/"+op, "application/json", strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("POST /v1/%s without the token: %s", op, resp.Status)
			}
		}
		c, err := d.Info().ControlClient(nil)
		if err != nil {
			t.Fatal(err)
		}
		if st, err := c.Status(context.Background()); err != nil || len(st.Processes) != len(d.procs) {
			t.Fatalf("status with the token: %v (%d processes)", err, len(st.Processes))
		}
	}
}

// A ready cluster registers its data dir for the tools; an entry whose
// cluster.json is gone is skipped; Stop removes the entry.
func TestDevRegistry(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	d := devForSecurity(t, false)
	d.register()
	if got := RegisteredDevClusters(); len(got) != 0 {
		t.Fatalf("registered without cluster.json: %v", got)
	}
	if err := os.WriteFile(filepath.Join(d.cfg.DataDir, DevClusterFile), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := RegisteredDevClusters(); len(got) != 1 || got[0] != d.cfg.DataDir {
		t.Fatalf("registered: %v, want [%s]", got, d.cfg.DataDir)
	}
	entry, err := registryEntry(d.cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	d.Stop(context.Background())
	if _, err := os.Stat(entry); !os.IsNotExist(err) {
		t.Fatalf("after Stop: %s: %v", entry, err)
	}
}
