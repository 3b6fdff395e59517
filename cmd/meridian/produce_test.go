package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// CLI tests run the real binary against a real `meridian standalone`
// child process on loopback.

var (
	cliBinOnce sync.Once
	cliBin     string
	cliBinErr  error
	cliBinDir  string
)

// cliBinary builds the meridian binary once per test process.
func cliBinary(t *testing.T) string {
	t.Helper()
	cliBinOnce.Do(func() {
		cliBinDir, cliBinErr = os.MkdirTemp("", "meridian-cli-test")
		if cliBinErr != nil {
			return
		}
		cliBin = filepath.Join(cliBinDir, "meridian")
		out, err := exec.Command("go", "build", "-o", cliBin, "github.com/meridianmq/meridian/cmd/meridian").CombinedOutput()
		if err != nil {
			cliBinErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if cliBinErr != nil {
		t.Fatal(cliBinErr)
	}
	return cliBin
}

func cliFreeAddr(t *testing.T) string {
	t.Helper()
	return childPorts.pick(t)
}

// cliStandalone starts `meridian standalone` and returns its gRPC address.
func cliStandalone(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	grpcAddr, httpAddr := cliFreeAddr(t), cliFreeAddr(t)
	p := startProc(t, "standalone", "standalone", "--data-dir", filepath.Join(dir, "data"), "--grpc", grpcAddr, "--http", httpAddr)
	waitHTTP(t, p, "http://"+httpAddr+"/readyz", 90*time.Second)
	return grpcAddr
}

type cliResult struct {
	stdout, stderr string
	code           int
}

// runCLI runs the binary with args and optional stdin.
func runCLI(t *testing.T, stdin string, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(cliBinary(t), args...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(120 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%v timed out; stderr: %s", args, se.String())
	}
	return cliResult{so.String(), se.String(), cmd.ProcessState.ExitCode()}
}

func jsonLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON line: %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func TestCLIProduceConsumeJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a region (-short)")
	}
	url := cliStandalone(t)
	const topic = "public/default/cli"
	r := runCLI(t, "", "produce", "--url", url, "--topic", topic, "--count", "20", "--size", "64", "--keys", "3", "--output", "json")
	if r.code != 0 {
		t.Fatalf("produce exit %d: %s", r.code, r.stderr)
	}
	prod := jsonLines(t, r.stdout)
	if len(prod) != 20 {
		t.Fatalf("produce printed %d lines, want 20:\n%s", len(prod), r.stdout)
	}
	ids := map[string]float64{}
	for _, l := range prod {
		id, _ := l["id"].(string)
		seq, _ := l["seq"].(float64)
		if strings.Count(id, ":") != 2 || l["key"] != fmt.Sprintf("k%d", int(seq)%3) {
			t.Fatalf("bad produce line %v", l)
		}
		ids[id] = seq
	}
	// Stdin lines, one of them not UTF-8.
	r = runCLI(t, "hello\nworld\n\xff\xfe\n", "produce", "--url", url, "--topic", topic, "--key", "in", "--output", "json")
	if r.code != 0 || len(jsonLines(t, r.stdout)) != 3 {
		t.Fatalf("produce from stdin: exit %d, out %q, err %q", r.code, r.stdout, r.stderr)
	}

	r = runCLI(t, "", "consume", "--url", url, "--topic", topic, "--subscription", "s", "--from", "earliest", "--count", "23", "--output", "json")
	if r.code != 0 {
		t.Fatalf("consume exit %d: %s", r.code, r.stderr)
	}
	cons := jsonLines(t, r.stdout)
	if len(cons) != 23 {
		t.Fatalf("consume printed %d lines, want 23", len(cons))
	}
	for i, l := range cons[:20] {
		seq, ok := ids[l["id"].(string)]
		if !ok || l["seq"].(float64) != seq {
			t.Fatalf("consumed %v not among produced IDs", l)
		}
		pl, _ := l["payload"].(string)
		if len(pl) != 64 || !strings.HasPrefix(pl, fmt.Sprintf("message-%d ", i)) || l["producer"] == "" || l["publish_time"] == "" {
			t.Fatalf("consumed line %d: %v", i, l)
		}
		if _, err := time.Parse(time.RFC3339Nano, l["publish_time"].(string)); err != nil {
			t.Fatalf("publish_time: %v", err)
		}
	}
	if cons[20]["payload"] != "hello" || cons[21]["payload"] != "world" || cons[20]["key"] != "in" {
		t.Fatalf("stdin messages: %v %v", cons[20], cons[21])
	}
	b64, _ := cons[22]["payload_b64"].(string)
	if raw, _ := base64.StdEncoding.DecodeString(b64); string(raw) != "\xff\xfe" || cons[22]["payload"] != nil {
		t.Fatalf("binary payload: %v", cons[22])
	}
	// Everything printed was acknowledged: the subscription is drained.
	r = runCLI(t, "", "consume", "--url", url, "--topic", topic, "--subscription", "s", "--count", "1", "--idle", "1s")
	if r.code == 0 || !strings.Contains(r.stderr, "no message") {
		t.Fatalf("drained subscription: exit %d, out %q, err %q", r.code, r.stdout, r.stderr)
	}
}

func TestCLIBadInputOneLineError(t *testing.T) {
	cases := [][]string{
		{"produce", "--topic", "a/b/c", "--bogus"},
		{"produce", "--topic", "not-a-topic"},
		{"produce", "--topic", "a/b/c", "--output", "yaml"},
		{"produce", "--topic", "a/b/c", "--key", "k", "--keys", "2"},
		{"consume", "--topic", "a/b/c"},
		{"consume", "--topic", "a/b/c", "--subscription", "s", "--type", "key_shared"},
		{"perf", "produce", "--topic", "a/b/c", "--duration", "0s"},
		{"admin", "tenants", "create"},
		{"produce", "--topic", "a/b/c", "--url", "127.0.0.1:1", "--connect-timeout", "500ms"},
	}
	for _, args := range cases {
		r := runCLI(t, "", args...)
		lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
		if r.code == 0 || len(lines) != 1 || !strings.HasPrefix(lines[0], "meridian: ") {
			t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
	// The error names the flag.
	r := runCLI(t, "", "consume", "--topic", "a/b/c", "--subscription", "s", "--from", "yesterday")
	if !strings.Contains(r.stderr, "--from") {
		t.Errorf("--from error does not name the flag: %q", r.stderr)
	}
}
