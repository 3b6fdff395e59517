package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLIContexts: a context saved with --url is used by every command
// once selected (no --url given), --context picks another for one
// command, a flag on the command line wins, and the file is mode 0600.
func TestCLIContexts(t *testing.T) {
	addr := cliStandalone(t)
	file := filepath.Join(t.TempDir(), "cfg", "contexts.yaml")
	t.Setenv("MERIDIAN_CONTEXTS", file)
	t.Setenv("MERIDIAN_CONTEXT", "")

	if r := runCLI(t, "", "context", "save", "local", "--url", addr); r.code != 0 {
		t.Fatalf("context save: %d %s", r.code, r.stderr)
	}
	if r := runCLI(t, "", "context", "save", "nowhere", "--url", "127.0.0.1:1"); r.code != 0 {
		t.Fatalf("context save nowhere: %d %s", r.code, r.stderr)
	}
	st, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if m := st.Mode().Perm(); m != 0o600 {
		t.Fatalf("contexts file mode %v, want 0600", m)
	}
	if r := runCLI(t, "", "context", "ls"); r.code != 0 || !strings.Contains(r.stdout, "* local") || !strings.Contains(r.stdout, "  nowhere") {
		t.Fatalf("context ls: %d %q %s", r.code, r.stdout, r.stderr)
	}
	// The first saved is selected: admin works without --url.
	if r := runCLI(t, "", "admin", "tenants", "list"); r.code != 0 || !strings.Contains(r.stdout, "public") {
		t.Fatalf("admin tenants list through context local: %d %q %s", r.code, r.stdout, r.stderr)
	}
	// --context for one command; a flag on the command line wins.
	if r := runCLI(t, "", "--context", "nowhere", "admin", "tenants", "list"); r.code == 0 {
		t.Fatalf("admin through context nowhere (127.0.0.1:1) succeeded: %q", r.stdout)
	}
	if r := runCLI(t, "", "--context", "nowhere", "admin", "--url", addr, "tenants", "list"); r.code != 0 {
		t.Fatalf("--url over context nowhere: %d %s", r.code, r.stderr)
	}
	if r := runCLI(t, "", "context", "select", "nowhere"); r.code != 0 {
		t.Fatalf("context select: %d %s", r.code, r.stderr)
	}
	if r := runCLI(t, "", "context", "show"); r.code != 0 || !strings.Contains(r.stdout, "--url 127.0.0.1:1") {
		t.Fatalf("context show: %d %q %s", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, "", "--context", "missing", "admin", "tenants", "list"); r.code == 0 || !strings.Contains(r.stderr, "no such context") {
		t.Fatalf("--context missing: %d %s", r.code, r.stderr)
	}
	if r := runCLI(t, "", "context", "save", "bad name", "--url", addr); r.code == 0 || !strings.Contains(r.stderr, "context name") {
		t.Fatalf("save with a bad name: %d %s", r.code, r.stderr)
	}
	if r := runCLI(t, "", "context", "rm", "nowhere"); r.code != 0 {
		t.Fatalf("context rm: %d %s", r.code, r.stderr)
	}
	if r := runCLI(t, "", "context", "ls"); r.code != 0 || strings.Contains(r.stdout, "nowhere") {
		t.Fatalf("context ls after rm: %d %q", r.code, r.stdout)
	}
}
