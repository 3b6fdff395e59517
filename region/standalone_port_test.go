package region

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStandaloneRaftPortTakenBeforeBind: a fresh standalone's Raft port is
// picked free, then bound; when another process takes it in between, the
// standalone picks another and starts. A port recorded in the data dir is
// never moved: its bind failure is the error.
func TestStandaloneRaftPortTakenBeforeBind(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	picks := 0
	orig := pickRaftAddr
	pickRaftAddr = func() (string, error) {
		picks++
		if picks == 1 {
			return held.Addr().String(), nil // taken by "another process"
		}
		return orig()
	}
	defer func() { pickRaftAddr = orig }()

	dir := t.TempDir()
	sa := startSA(t, dir)
	b, err := os.ReadFile(filepath.Join(dir, "raft-address"))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.TrimSpace(string(b))
	if picks != 2 || got == held.Addr().String() {
		t.Fatalf("%d picks, recorded %s (held %s)", picks, got, held.Addr())
	}
	sa.Close()

	// The recorded port, taken: an error naming it, nothing moved.
	l, err := net.Listen("tcp", got)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := StartStandalone(ctx, StandaloneConfig{DataDir: dir, GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0"}); err == nil || !strings.Contains(err.Error(), got) {
		t.Fatalf("restart with its Raft port taken: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "raft-address")); strings.TrimSpace(string(b)) != got {
		t.Fatalf("recorded address moved to %q", b)
	}
}
