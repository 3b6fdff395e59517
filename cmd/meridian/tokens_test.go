package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLITokens: the keys and tokens of `meridian tokens`, as an operator
// makes them: a secret key and a key pair (files 0600 for what is
// secret), tokens signed with each, validated with the matching key and
// refused with another; show prints the claims.
func TestCLITokens(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret.key")
	if r := runCLI(t, "", "tokens", "create-secret-key", "--output", secret); r.code != 0 {
		t.Fatalf("create-secret-key: %d %s", r.code, r.stderr)
	}
	mode := func(p string) os.FileMode {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return st.Mode().Perm()
	}
	if m := mode(secret); m != 0o600 {
		t.Fatalf("secret key file mode %v, want 0600", m)
	}
	tokFile := filepath.Join(dir, "app1.token")
	r := runCLI(t, "", "tokens", "create", "--secret-key", secret, "--subject", "app1", "--expiry", "30d", "--output", tokFile)
	if r.code != 0 {
		t.Fatalf("create: %d %s", r.code, r.stderr)
	}
	if m := mode(tokFile); m != 0o600 {
		t.Fatalf("token file mode %v, want 0600", m)
	}
	if r := runCLI(t, "", "tokens", "validate", "--secret-key", secret, "--token-file", tokFile); r.code != 0 || !strings.Contains(r.stdout, "role app1") {
		t.Fatalf("validate: %d %q %s", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, "", "tokens", "show", "--token-file", tokFile); r.code != 0 || !strings.Contains(r.stdout, `"sub": "app1"`) || !strings.Contains(r.stdout, `"alg": "HS256"`) || !strings.Contains(r.stdout, `"expires"`) {
		t.Fatalf("show: %d %q %s", r.code, r.stdout, r.stderr)
	}

	for _, alg := range []string{"RS256", "ES256"} {
		priv, pub := filepath.Join(dir, alg+".priv"), filepath.Join(dir, alg+".pub")
		if r := runCLI(t, "", "tokens", "create-key-pair", "--algorithm", alg, "--output-private-key", priv, "--output-public-key", pub); r.code != 0 {
			t.Fatalf("create-key-pair %s: %d %s", alg, r.code, r.stderr)
		}
		if m := mode(priv); m != 0o600 {
			t.Fatalf("%s private key mode %v, want 0600", alg, m)
		}
		r := runCLI(t, "", "tokens", "create", "--private-key", priv, "--subject", "admin")
		if r.code != 0 {
			t.Fatalf("create with %s: %d %s", alg, r.code, r.stderr)
		}
		tok := strings.TrimSpace(r.stdout)
		if r := runCLI(t, "", "tokens", "validate", "--public-key", pub, tok); r.code != 0 || !strings.Contains(r.stdout, "role admin") {
			t.Fatalf("validate %s: %d %q %s", alg, r.code, r.stdout, r.stderr)
		}
		// The HS256 key does not verify it, nor does the HS256 token verify
		// against the public key (no algorithm confusion).
		if r := runCLI(t, "", "tokens", "validate", "--secret-key", secret, tok); r.code == 0 {
			t.Fatalf("%s token validated with the HS256 secret: %q", alg, r.stdout)
		}
		if r := runCLI(t, "", "tokens", "validate", "--public-key", pub, "--token-file", tokFile); r.code == 0 {
			t.Fatalf("HS256 token validated with the %s public key: %q", alg, r.stdout)
		}
	}
	if r := runCLI(t, "", "tokens", "create", "--secret-key", secret); r.code == 0 || !strings.Contains(r.stderr, "--subject is required") {
		t.Fatalf("create without --subject: %d %s", r.code, r.stderr)
	}
	if r := runCLI(t, "", "tokens", "create", "--subject", "x"); r.code == 0 || !strings.Contains(r.stderr, "exactly one of --secret-key and --private-key") {
		t.Fatalf("create without a key: %d %s", r.code, r.stderr)
	}
}
