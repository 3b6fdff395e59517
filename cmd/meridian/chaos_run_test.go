//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meridianmq/meridian/chaos/check"
	"github.com/meridianmq/meridian/chaos/run"
)

// Process-level tests of `meridian chaos run`: the CLI starts its own
// `meridian dev` cluster (--dev) with fault injection, runs the workload
// under a fixed schedule, and prints one JSON verdict line.

// runChaosCLI runs `meridian chaos ARGS --output json` and returns the
// verdict (zero when the exit code is 2), the exit code and stderr.
func runChaosCLI(t *testing.T, timeout time.Duration, args ...string) (check.Verdict, int, string) {
	t.Helper()
	cmd := exec.Command(cliBinary(t), append(append([]string{"chaos"}, args...), "--output", "json")...)
	cmd.Dir = t.TempDir() // a run without --report writes chaos-ID/ in its working directory
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(timeout):
		// SIGINT first: the run heals and stops its dev cluster.
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(90 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		t.Fatalf("chaos %v: still running after %v; stderr:\n%s", args, timeout, tail(se.String(), 8000))
	}
	var v check.Verdict
	code := cmd.ProcessState.ExitCode()
	if code != 2 {
		lines := strings.Split(strings.TrimSpace(so.String()), "\n")
		if len(lines) != 1 {
			t.Fatalf("chaos %v: exit %d, want one JSON line on stdout, got %q; stderr:\n%s", args, code, so.String(), tail(se.String(), 8000))
		}
		if err := json.Unmarshal([]byte(lines[0]), &v); err != nil {
			t.Fatalf("chaos %v: JSON line %q: %v", args, lines[0], err)
		}
	}
	return v, code, se.String()
}

func logVerdict(t *testing.T, v check.Verdict) {
	t.Helper()
	var b bytes.Buffer
	_ = v.WriteText(&b)
	t.Logf("verdict:\n%s", b.String())
}

// requirePass fails unless the named checker ran and passed with count 0.
func requirePass(t *testing.T, v check.Verdict, names ...string) {
	t.Helper()
	for _, n := range names {
		r, ok := v.Result(n)
		if !ok || !r.Pass || r.Count != 0 {
			t.Errorf("checker %s: ran %v, pass %v, count %d: %s %v", n, ok, r.Pass, r.Count, r.Detail, r.Examples)
		}
	}
}

// keptDir is a temporary directory removed after the test unless it
// failed (then its dev cluster logs and report are kept for diagnosis).
func keptDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", t.Name()+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kept %s (dev cluster logs, report)", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	return dir
}

// readHistory reads a run's history.jsonl.
func readHistory(t *testing.T, dir string) check.History {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := check.ReadHistory(f)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// smokeSeed is the smoke run's fixed seed.
const smokeSeed = 12

// TestChaosSmoke is the short seeded smoke of `make test`: `meridian
// chaos run --dev a,b` (three bookies and two brokers per region, fault
// injection on), seed 12, every fault kind of the catalogue that two
// regions allow at least once, each injected and healed without error;
// the verdict must be valid with 0 lost, 0 unexpected, 0 divergence.
// Duplicates are logged. About 3 minutes (the faults take 100s).
func TestChaosSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev cluster for ~3 minutes (-short)")
	}
	dir := keptDir(t)
	report := filepath.Join(dir, "report")
	start := time.Now()
	v, code, stderr := runChaosCLI(t, 9*time.Minute, "run", "--dev", "a,b", "--data-dir", filepath.Join(dir, "dev"),
		"--seed", strconv.Itoa(smokeSeed), "--duration", "100s", "--rate", "200", "--topics", "1", "--quiet", "90s", "--report", report)
	t.Logf("chaos run: exit %d in %v", code, time.Since(start).Round(time.Second))
	if code == 2 {
		t.Fatalf("chaos run could not complete; stderr:\n%s", tail(stderr, 12000))
	}
	logVerdict(t, v)
	requirePass(t, v, "lost", "unexpected", "divergence", "stuck")
	if code != 0 || !v.Valid {
		t.Errorf("chaos run: exit %d, valid %v; stderr:\n%s", code, v.Valid, tail(stderr, 12000))
	}
	h := readHistory(t, report)
	if v.Stats.Acked == 0 || len(v.Stats.ReadPerRegion) != 2 {
		t.Errorf("chaos run: %d acknowledged, read back in %v: the workload did not run in both regions", v.Stats.Acked, v.Stats.ReadPerRegion)
	}
	t.Logf("duplicates: %d deliveries beyond the first per subscription; %d timed-out sends, %d of them stored", v.Stats.Duplicates, v.Stats.Timeouts, v.Stats.IndefiniteStored)

	// Every fault kind two regions allow was injected and healed.
	seen := map[string]int{}
	for _, r := range h.Records {
		if r.Kind != check.KindFaultStart && r.Kind != check.KindFaultEnd {
			continue
		}
		if r.Fault.Err != "" {
			t.Errorf("fault %d %s on %v (%s): %s: %s", r.Fault.ID, r.Fault.Kind, r.Fault.Targets, r.Fault.Detail, r.Kind, r.Fault.Err)
		}
		if r.Kind == check.KindFaultEnd {
			seen[r.Fault.Kind]++
		}
	}
	// Every kind of the default families (the operator actions are not
	// in them: their scenario is operator-actions).
	for _, k := range run.Catalogue() {
		if k.MinRegions <= 2 && slices.Contains(run.DefaultFamilies, k.Family) && seen[k.Name] == 0 {
			t.Errorf("fault kind %s never ran (ran: %v)", k.Name, seen)
		}
	}
	for _, f := range []string{"verdict.json", "verdict.txt", "schedule.json", "report.html"} {
		if b, err := os.ReadFile(filepath.Join(report, f)); err != nil || len(b) == 0 {
			t.Errorf("report file %s: %v", f, err)
		}
	}
	// The dev cluster is down: no process of it is left.
	if _, err := os.Stat(filepath.Join(dir, "dev", "cluster.json")); !os.IsNotExist(err) {
		t.Errorf("cluster.json still there after the run: %v", err)
	}
}

// TestChaosCatchesAckBeforeSync is the broken-build test: the bookies run
// with unsafe_ack_before_sync (they acknowledge adds before their fsync)
// and scenario power-loss-quorum cuts the power of every bookie of region
// a and kills its brokers. The acknowledged, unsynced entries are gone from
// a's log: the run must report them (lost or divergence of acknowledged
// messages) and exit 1.
func TestChaosCatchesAckBeforeSync(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev cluster (-short)")
	}
	dir := keptDir(t)
	report := filepath.Join(dir, "report")
	v, code, stderr := runChaosCLI(t, 8*time.Minute, "run", "--dev", "a,b", "--data-dir", filepath.Join(dir, "dev"),
		"--unsafe-ack-before-sync", "--scenario", "power-loss-quorum", "--rate", "400", "--topics", "1", "--quiet", "45s", "--report", report)
	if code == 2 {
		t.Fatalf("chaos run could not complete; stderr:\n%s", tail(stderr, 12000))
	}
	logVerdict(t, v)
	// The acknowledged, unsynced entries are gone from region a's log:
	// its complete read-back lacks them, so they are lost there (even
	// those its consumers had received before the power cut).
	lost, _ := v.Result("lost")
	div, _ := v.Result("divergence")
	if code != 1 || v.Valid || lost.Pass || lost.Count == 0 {
		t.Fatalf("a build that acknowledges before fsync passed: exit %d, valid %v, lost %d, divergence %d; stderr:\n%s", code, v.Valid, lost.Count, div.Count, tail(stderr, 8000))
	}
	t.Logf("broken build caught: lost %d (%s); divergence %d (%s)", lost.Count, lost.Detail, div.Count, div.Detail)
}

// TestChaosRunBadInput: bad flags exit 2 naming the flag, before any
// cluster starts; `chaos list` shows the catalogue.
func TestChaosRunBadInput(t *testing.T) {
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--dev", "a,b", "--faults", "kill,flood"}, `"flood"`},
		{[]string{"run"}, "exactly one of --cluster"},
		{[]string{"run", "--dev", "a,b", "--cluster", "x"}, "exactly one of --cluster"},
		{[]string{"run", "--dev", "a,b", "--rate", "0"}, "--rate"},
		{[]string{"run", "--dev", "a,b", "--scenario", "nope"}, "--scenario"},
		{[]string{"run", "--dev", "a,b", "--topics", "99"}, "--topics"},
		{[]string{"run", "--cluster", t.TempDir()}, "no running cluster"},
	} {
		_, code, stderr := runChaosCLI(t, time.Minute, bad.args...)
		if code != 2 || !strings.Contains(stderr, bad.want) {
			t.Fatalf("chaos %v: exit %d, stderr %q; want exit 2 naming %q", bad.args, code, stderr, bad.want)
		}
	}
	out, err := exec.Command(cliBinary(t), "chaos", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("chaos list: %v\n%s", err, out)
	}
	for _, k := range append(run.Catalogue(), run.Kind{Name: "zombie-owner"}, run.Kind{Name: "power-loss"}) {
		if !strings.Contains(string(out), k.Name) {
			t.Fatalf("chaos list lacks %s:\n%s", k.Name, out)
		}
	}
}
