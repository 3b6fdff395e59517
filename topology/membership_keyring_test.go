package topology

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meridianmq/meridian/security"
)

func writeKeys(t *testing.T, path string, keys ...string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(keys, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func startKeyed(t *testing.T, name, keyFile string, seeds ...string) *Membership {
	t.Helper()
	cfg := DefaultMembershipConfig().WithFastFailureDetection()
	cfg.NodeName, cfg.Region, cfg.Role, cfg.Seeds = name, "us", RoleBookie, seeds
	cfg.KeyFile = keyFile
	cfg.KeyReloadInterval = time.Second
	cfg.Logger = testLogger(t)
	m, err := NewMembership(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown() })
	return m
}

func memberNames(m *Membership) []string {
	var out []string
	for _, x := range m.Members() {
		out = append(out, x.Name)
	}
	return out
}

// TestGossipKeyringRotation rotates the pool's key through the key files
// of two members (add the new key, make it primary, drop the old) while
// they stay members of each other; a member with the new key joins
// afterwards, members with the old key or none never do.
func TestGossipKeyringRotation(t *testing.T) {
	dir := t.TempDir()
	k1, k2 := security.GenerateGossipKey(), security.GenerateGossipKey()
	fa, fb := filepath.Join(dir, "a.keys"), filepath.Join(dir, "b.keys")
	writeKeys(t, fa, k1)
	writeKeys(t, fb, k1)
	a := startKeyed(t, "a", fa)
	b := startKeyed(t, "b", fb, a.Addr())
	both := func() bool {
		return slices.Contains(memberNames(a), "b") && slices.Contains(memberNames(b), "a")
	}
	waitFor(t, 20*time.Second, "a and b joined with the shared key", both)
	keyless := startNode(t, "keyless", "r1", nil, a.Addr())

	step := func(what string, keys []string, want func(*Membership) bool) {
		t.Helper()
		writeKeys(t, fa, keys...)
		writeKeys(t, fb, keys...)
		waitFor(t, 20*time.Second, what, func() bool { return want(a) && want(b) })
		waitFor(t, 20*time.Second, "a and b still members after "+what, both)
	}
	raw2 := mustKey(t, k2)
	step("new key added", []string{k1, k2}, func(m *Membership) bool { _, all := m.Keys(); return len(all) == 2 })
	step("new key primary", []string{k2, k1}, func(m *Membership) bool { p, _ := m.Keys(); return bytes.Equal(p, raw2) })
	step("old key removed", []string{k2}, func(m *Membership) bool { _, all := m.Keys(); return len(all) == 1 })

	// A bad file is refused; the keyring stays.
	writeKeys(t, fa, "not a key")
	waitFor(t, 20*time.Second, "bad key file refused", func() bool {
		return counterValue(t, a.metrics.keyReloadFailures) > 0
	})
	if p, _ := a.Keys(); !bytes.Equal(p, raw2) {
		t.Fatal("a bad key file changed the keyring")
	}

	fo, fn := filepath.Join(dir, "old.keys"), filepath.Join(dir, "new.keys")
	writeKeys(t, fo, k1)
	writeKeys(t, fn, k2)
	old := startKeyed(t, "old", fo, a.Addr())
	fresh := startKeyed(t, "fresh", fn, a.Addr())
	waitFor(t, 20*time.Second, "a member with the new key joins", func() bool {
		return slices.Contains(memberNames(a), "fresh") && slices.Contains(memberNames(b), "fresh") && slices.Contains(memberNames(fresh), "b")
	})
	for _, m := range []*Membership{a, b} {
		for _, n := range memberNames(m) {
			if n == "old" || n == "keyless" {
				t.Fatalf("%s admitted %s, which lacks the pool's key", m.LocalName(), n)
			}
		}
	}
	if len(old.Members()) != 1 || len(keyless.Members()) != 1 {
		t.Fatalf("members without the key joined someone: old %v, keyless %v", memberNames(old), memberNames(keyless))
	}
}

func mustKey(t *testing.T, k string) []byte {
	t.Helper()
	keys, err := security.ParseGossipKeys([]byte(k))
	if err != nil {
		t.Fatal(err)
	}
	return keys[0]
}
