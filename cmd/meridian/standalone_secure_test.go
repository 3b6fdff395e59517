package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStandaloneSecure: `standalone --secure` generates its CA, keys and
// admin token, prints how to use them, and then serves TLS with token
// authentication only: plaintext and anonymous calls are refused, the
// printed flags (and a context saved from them) work for admin, produce
// and consume; a restart reuses the same credentials.
func TestStandaloneSecure(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	t.Setenv("MERIDIAN_CONTEXTS", filepath.Join(dir, "contexts.yaml"))
	grpcAddr, httpAddr := cliFreeAddr(t), cliFreeAddr(t)
	start := func() *proc {
		return startProc(t, "standalone", "standalone", "--secure", "--data-dir", data, "--grpc", grpcAddr, "--http", httpAddr)
	}
	p := start()
	ca, tok := filepath.Join(data, "security", "ca.pem"), filepath.Join(data, "security", "admin.token")
	creds := []string{"--url", grpcAddr, "--tls-ca", ca, "--token-file", tok}
	waitFor(t, "secure standalone answers admin with the admin token", 90*time.Second, func() (bool, string) {
		r := runCLI(t, "", append([]string{"admin"}, append(creds, "tenants", "list")...)...)
		return r.code == 0, r.stderr
	})
	if out := p.log.String(); !strings.Contains(out, "meridian context save standalone --url "+grpcAddr) || !strings.Contains(out, "--tls-ca "+ca) {
		t.Fatalf("the standalone does not print how to connect:\n%s", out)
	}
	if r := runCLI(t, "", "admin", "--url", grpcAddr, "tenants", "list"); r.code == 0 {
		t.Fatalf("plaintext admin call answered: %q", r.stdout)
	}
	if r := runCLI(t, "", "admin", "--url", grpcAddr, "--tls-ca", ca, "tenants", "list"); r.code == 0 {
		t.Fatalf("anonymous TLS admin call answered: %q", r.stdout)
	} else if !strings.Contains(strings.ToLower(r.stderr), "unauthenticated") {
		t.Logf("anonymous call refused: %s", r.stderr)
	}
	if r := runCLI(t, "", append([]string{"context", "save", "standalone"}, creds...)...); r.code != 0 {
		t.Fatalf("context save: %d %s", r.code, r.stderr)
	}
	if r := runCLI(t, "", "produce", "--topic", "public/default/secure", "--count", "5"); r.code != 0 {
		t.Fatalf("produce through the context: %d %s", r.code, r.stderr)
	}
	r := runCLI(t, "", "consume", "--topic", "public/default/secure", "--subscription", "s", "--from", "earliest", "--count", "5", "--output", "json")
	if r.code != 0 || len(jsonLines(t, r.stdout)) != 5 {
		t.Fatalf("consume through the context: %d %q %s", r.code, r.stdout, r.stderr)
	}
	p.stop()
	p = start()
	waitFor(t, "restarted secure standalone answers with the same admin token", 90*time.Second, func() (bool, string) {
		r := runCLI(t, "", "admin", "tenants", "list")
		return r.code == 0, r.stderr + tail(p.log.String(), 2000)
	})
	checkPrivate(t, data)
}
