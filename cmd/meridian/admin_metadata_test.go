package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// oneLineError asserts a refusal: non-zero exit and one line on stderr
// that mentions want.
func oneLineError(t *testing.T, r cliResult, args []string, want string) {
	t.Helper()
	if r.code == 0 || !strings.Contains(r.stderr, want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Fatalf("%v: exit %d, stderr %q (want one line mentioning %q)", args, r.code, r.stderr, want)
	}
}

func TestCLIAdminMetadataAndLedgers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a region (-short)")
	}
	url := cliStandalone(t)
	ok := func(args ...string) cliResult {
		t.Helper()
		r := runCLI(t, "", append([]string{"admin", "--url", url}, args...)...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d: %s", args, r.code, r.stderr)
		}
		return r
	}

	// Who leads: the standalone's one node leads both shards (global and
	// its region's, "standalone").
	r := ok("metadata", "status")
	for _, shard := range []string{"global", "standalone"} {
		re := regexp.MustCompile(`(?m)^shard ` + shard + `: leader 1 \(127\.0\.0\.1:\d+\), term [1-9]\d*; node 1 \(127\.0\.0\.1:\d+\) is the leader$`)
		if !re.MatchString(r.stdout) {
			t.Fatalf("metadata status text lacks shard %s:\n%s", shard, r.stdout)
		}
	}
	t.Logf("metadata status:\n%s", r.stdout)
	r = ok("metadata", "status", "--output", "json")
	st := jsonLines(t, r.stdout)
	if len(st) != 2 || st[0]["shard"] != "global" || st[0]["leader_id"] != float64(1) || st[0]["is_leader"] != true || st[1]["shard"] != "standalone" {
		t.Fatalf("metadata status json: %q", r.stdout)
	}

	// A topic with a ledger.
	const topic = "public/default/ledgers"
	if p := runCLI(t, "", "produce", "--url", url, "--topic", topic, "--count", "5", "--size", "16"); p.code != 0 {
		t.Fatalf("produce: exit %d: %s", p.code, p.stderr)
	}
	r = ok("ledgers", "list", "--topic", topic, "--output", "json")
	ls := jsonLines(t, r.stdout)
	if len(ls) == 0 {
		t.Fatalf("ledgers list json: %q", r.stdout)
	}
	l0 := ls[0]
	segs, _ := l0["segments"].([]any)
	if l0["state"] != "open" || l0["ensemble_size"] != float64(1) || l0["write_quorum"] != float64(1) || l0["topic_seq"] == nil || len(segs) != 1 {
		t.Fatalf("first ledger of %s: %v", topic, l0)
	}
	ens := segs[0].(map[string]any)["ensemble"].([]any)
	if len(ens) != 1 || ens[0].(map[string]any)["bookie_id"] != "bookie-0" {
		t.Fatalf("ensemble: %v", segs[0])
	}
	id := fmt.Sprint(int64(l0["ledger_id"].(float64)))
	r = ok("ledgers", "list", "--topic", topic)
	if !strings.Contains(r.stdout, "ledger "+id+" state=open E=1 Qw=1 Qa=1") || !strings.Contains(r.stdout, "bookie-0@127.0.0.1:") {
		t.Fatalf("ledgers list text: %q", r.stdout)
	}
	r = ok("ledgers", "get", id)
	t.Logf("ledgers get %s:\n%s", id, r.stdout)
	if !strings.HasPrefix(r.stdout, "ledger "+id+" state=open E=1 Qw=1 Qa=1 last_entry=-1") || !strings.Contains(r.stdout, "  entries 0..open: bookie-0@") {
		t.Fatalf("ledgers get text: %q", r.stdout)
	}
	r = ok("ledgers", "get", id, "--output", "json")
	if g := jsonLines(t, r.stdout); len(g) != 1 || fmt.Sprint(g[0]["ledger_id"]) != fmt.Sprint(l0["ledger_id"]) || g[0]["state"] != "open" {
		t.Fatalf("ledgers get json: %q", r.stdout)
	}

	// Metadata keys, read-only.
	r = ok("metadata", "list", "managed-ledgers/")
	if !strings.HasPrefix(r.stdout, "managed-ledgers/"+topic+" version=") || !strings.Contains(r.stdout, `value={"ledgers":`) {
		t.Fatalf("metadata list text: %q", r.stdout)
	}
	r = ok("metadata", "list", "ledgers/", "--output", "json")
	if kl := jsonLines(t, r.stdout); len(kl) == 0 || kl[0]["encoding"] != "text" || !strings.HasPrefix(kl[0]["key"].(string), "ledgers/") {
		t.Fatalf("metadata list json: %q", r.stdout)
	}
	r = ok("metadata", "get", "managed-ledgers/"+topic, "--output", "json")
	if g := jsonLines(t, r.stdout); len(g) != 1 || g[0]["encoding"] != "text" || !strings.Contains(g[0]["value"].(string), `"ledgers"`) || g[0]["version"].(float64) < 1 {
		t.Fatalf("metadata get json: %q", r.stdout)
	}
	r = ok("metadata", "get", "tenants/public", "--shard", "global")
	if !strings.HasPrefix(r.stdout, "key: tenants/public\nversion: 1\n") || !strings.Contains(r.stdout, "encoding: text\nvalue: ") {
		t.Fatalf("metadata get text: %q", r.stdout)
	}
	r = ok("metadata", "list", "", "--limit", "2")
	if n := strings.Count(r.stdout, "\n"); n != 2 || !strings.Contains(r.stderr, "more follow") {
		t.Fatalf("metadata list --limit 2: %d lines %q, stderr %q", n, r.stdout, r.stderr)
	}

	// Bad input and unreachable servers: one line on stderr, exit 1.
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"admin", "--url", url, "ledgers", "get", "abc"}, `ID "abc"`},
		{[]string{"admin", "--url", url, "ledgers", "get", "--", "-5"}, `ID "-5"`},
		{[]string{"admin", "--url", url, "ledgers", "get", "987654321"}, "ledger 987654321"},
		{[]string{"admin", "--url", url, "ledgers", "list"}, "--topic"},
		{[]string{"admin", "--url", url, "ledgers", "list", "--topic", "no-such"}, "topic"},
		{[]string{"admin", "--url", url, "ledgers", "list", "--topic", "public/default/none"}, "not found"},
		{[]string{"admin", "--url", url, "ledgers"}, "missing action"},
		{[]string{"admin", "--url", url, "metadata", "get", "no/such/key"}, "not found"},
		{[]string{"admin", "--url", url, "metadata", "get", "k", "--shard", "eu"}, "--shard"},
		{[]string{"admin", "--url", url, "metadata", "get", ""}, "key"},
		{[]string{"admin", "--url", url, "metadata", "get", strings.Repeat("k", 1025)}, "1024"},
		{[]string{"admin", "--url", url, "metadata", "list", "p", "--limit", "0"}, "--limit"},
		{[]string{"admin", "--url", url, "metadata", "list"}, "want 1 argument"},
		{[]string{"admin", "--url", url, "metadata", "status", "--output", "yaml"}, "--output"},
		{[]string{"admin", "--url", url, "metadata"}, "missing action"},
		{[]string{"admin", "--url", cliFreeAddr(t), "--connect-timeout", "2s", "metadata", "status"}, "--url"},
		{[]string{"admin", "--connect-timeout", "2s", "metadata", "status", "--metadata", cliFreeAddr(t)}, "no metadata node answered"},
	} {
		r := runCLI(t, "", bad.args...)
		oneLineError(t, r, bad.args, bad.want)
		t.Logf("%v: %s", bad.args[3:], strings.TrimSpace(r.stderr))
	}
}

// TestCLIAdminMetadataStatusDirect asks a `meridian meta` process directly
// (--metadata), without any broker.
func TestCLIAdminMetadataStatusDirect(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a metadata node (-short)")
	}
	dir := t.TempDir()
	raft, grpcAddr, httpAddr := cliFreeAddr(t), cliFreeAddr(t), cliFreeAddr(t)
	cfg := fmt.Sprintf("node_id: 1\nraft_address: %s\ngrpc_address: %s\nhttp_address: %s\ndata_dir: %s\nshards:\n"+
		"  - {name: global, shard_id: 1, members: {1: %s}}\n  - {name: local, shard_id: 2, members: {1: %s}}\n",
		raft, grpcAddr, httpAddr, filepath.Join(dir, "meta"), raft, raft)
	path := filepath.Join(dir, "meta.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	meta := startProc(t, "meta", "meta", "--config", path)
	waitHTTP(t, meta, "http://"+httpAddr+"/readyz", 60*time.Second)
	dead := cliFreeAddr(t)
	r := runCLI(t, "", "admin", "--connect-timeout", "5s", "metadata", "status", "--metadata", grpcAddr+","+dead, "--output", "json")
	if r.code != 0 {
		t.Fatalf("status --metadata: exit %d: %s", r.code, r.stderr)
	}
	ls := jsonLines(t, r.stdout)
	if len(ls) != 3 || ls[0]["endpoint"] != grpcAddr || ls[0]["shard"] != "global" || ls[0]["is_leader"] != true ||
		ls[0]["leader_address"] != raft || ls[1]["shard"] != "local" || ls[2]["endpoint"] != dead || ls[2]["error"] == nil {
		t.Fatalf("status --metadata json: %q", r.stdout)
	}
	r = runCLI(t, "", "admin", "metadata", "status", "--metadata", grpcAddr)
	if r.code != 0 || !strings.Contains(r.stdout, "shard local: leader 1 ("+raft+"), term ") || !strings.Contains(r.stdout, "is the leader") {
		t.Fatalf("status --metadata text: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	// The leadership log line.
	if !strings.Contains(meta.log.String(), "metadata shard leader changed") {
		t.Fatalf("meta logged no leadership line:\n%s", meta.log.String())
	}
}

func TestDisplayValue(t *testing.T) {
	for _, c := range []struct {
		in        []byte
		want, enc string
	}{
		{[]byte(`{"a":1}`), `{"a":1}`, "text"},
		{[]byte("two\nlines\tok"), "two\nlines\tok", "text"},
		{[]byte{}, "", "text"},
		{[]byte{0, 1, 2, 0xff}, "AAEC/w==", "base64"},
		{[]byte("bell\a"), "YmVsbAc=", "base64"},
		{[]byte{0xc3, 0x28}, "wyg=", "base64"},
	} {
		if got, enc := displayValue(c.in); got != c.want || enc != c.enc {
			t.Errorf("displayValue(%q) = %q, %s; want %q, %s", c.in, got, enc, c.want, c.enc)
		}
	}
}
