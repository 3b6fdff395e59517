package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meridianmq/meridian/chaos/check"
)

// writeHistory writes a small two-region history to dir/history.jsonl:
// two messages acknowledged in a, both read back in a, and in b only the
// first unless complete.
func writeHistory(t *testing.T, dir string, complete bool) string {
	t.Helper()
	path := filepath.Join(dir, "history.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := check.NewWriter(f)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	n := 0
	add := func(r check.Record) {
		n++
		r.T = t0.Add(time.Duration(n) * 100 * time.Millisecond)
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	add(check.Record{Kind: check.KindRun, Run: &check.Run{ID: "cli", Seed: 1, Regions: []string{"a", "b"}, Topics: []string{"t"}}})
	add(check.Record{Kind: check.KindFaultStart, Fault: &check.Fault{ID: 1, Kind: "kill", Targets: []string{"a/broker-0"}}})
	for seq := int64(1); seq <= 2; seq++ {
		m := check.Record{Region: "a", Origin: "a", Producer: "p", Seq: seq, Topic: "t"}
		for _, k := range []check.Kind{check.KindSend, check.KindAck} {
			m.Kind = k
			add(m)
		}
	}
	add(check.Record{Kind: check.KindFaultEnd, Fault: &check.Fault{ID: 1, Kind: "kill", Targets: []string{"a/broker-0"}}})
	for _, reg := range []string{"a", "b"} {
		for seq := int64(1); seq <= 2; seq++ {
			if reg == "b" && seq == 2 && !complete {
				continue
			}
			add(check.Record{Kind: check.KindRead, Region: reg, Origin: "a", Producer: "p", Seq: seq, Topic: "t"})
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return path
}

// runChaosCheck runs `meridian chaos check ARGS` and returns stdout,
// stderr and the exit code.
func runChaosCheck(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(cliBinary(t), append([]string{"chaos", "check"}, args...)...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return so.String(), se.String(), cmd.ProcessState.ExitCode()
}

func TestChaosCheckCLI(t *testing.T) {
	dir := t.TempDir()
	// Valid: exit 0, the verdict table.
	good := writeHistory(t, t.TempDir(), true)
	out, errOut, code := runChaosCheck(t, good)
	if code != 0 || !strings.Contains(out, "VALID") || !strings.Contains(out, "CHECKER") {
		t.Fatalf("valid history: exit %d\n%s\n%s", code, out, errOut)
	}
	// A lost message: exit 1, one JSON line, the report files.
	bad := writeHistory(t, t.TempDir(), false)
	out, errOut, code = runChaosCheck(t, bad, "--output", "json", "--report", dir)
	if code != 1 {
		t.Fatalf("lost message: exit %d, want 1\n%s\n%s", code, out, errOut)
	}
	if strings.Count(out, "\n") != 1 {
		t.Fatalf("want one JSON line, got %q", out)
	}
	var v check.Verdict
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	if r, _ := v.Result(check.CheckLost); v.Valid || r.Pass || r.Count != 1 {
		t.Fatalf("verdict %+v", v)
	}
	if !strings.Contains(errOut, "lost (1)") {
		t.Fatalf("stderr %q does not name the failed checker", errOut)
	}
	for _, name := range []string{"report.html", "verdict.json", "verdict.txt"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || len(b) == 0 {
			t.Fatalf("%s: %v", name, err)
		}
	}
	// Only the checkers asked for: divergence alone fails too, order alone
	// passes.
	if _, _, code = runChaosCheck(t, bad, "--checkers", "order"); code != 0 {
		t.Fatalf("--checkers order: exit %d, want 0", code)
	}
	// Unreadable history, bad options: exit 2, naming the problem.
	broken := filepath.Join(dir, "broken.jsonl")
	if err := os.WriteFile(broken, []byte("{\"kind\":\"run\"}\nnot json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.jsonl")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{broken}, "line 2"},
		{[]string{empty}, "history is empty"},
		{[]string{filepath.Join(dir, "missing.jsonl")}, "no such file"},
		{[]string{good, "--output", "yaml"}, "--output"},
		{[]string{good, "--checkers", "lost,nope"}, "checkers[1]"},
		{[]string{good, "--stuck-samples", "1"}, "stuck_samples"},
	} {
		out, errOut, code := runChaosCheck(t, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Fatalf("%v: exit %d, stderr %q (want 2 naming %q); stdout %q", c.args, code, errOut, c.want, out)
		}
	}
}
