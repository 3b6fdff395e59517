package main

import (
	"strings"
	"testing"
)

// perf fanout delivers every acknowledged message to every subscription
// and reports it; perf catchup then reads the same topic's whole backlog;
// bad flags are refused with the flag's name.
func TestCLIPerfFanoutCatchup(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a region (-short)")
	}
	url := cliStandalone(t)
	const topic = "public/default/fan"
	r := runCLI(t, "", "perf", "fanout", "--url", url, "--topic", topic, "--subscriptions", "3", "--rate", "500", "--size", "256",
		"--duration", "2s", "--drain", "30s", "--receiver-queue", "50", "--output", "json", "--subscription", "fo")
	if r.code != 0 {
		t.Fatalf("perf fanout: exit %d: %s", r.code, r.stderr)
	}
	lines := jsonLines(t, r.stdout)
	if len(lines) != 1 {
		t.Fatalf("perf fanout printed %d JSON lines: %q", len(lines), r.stdout)
	}
	s := lines[0]
	produced, _ := s["produced"].(float64)
	subs, _ := s["subscriptions"].([]any)
	if produced < 100 || len(subs) != 3 {
		t.Fatalf("perf fanout: implausible summary %v", s)
	}
	for _, x := range subs {
		sub := x.(map[string]any)
		if sub["received"].(float64) != produced {
			t.Fatalf("subscription %v received %v of %v acknowledged messages", sub["name"], sub["received"], produced)
		}
		if !strings.HasPrefix(sub["name"].(string), "fo-") || sub["p50_ms"].(float64) > sub["p99_ms"].(float64) {
			t.Fatalf("subscription summary %v", sub)
		}
	}
	if s["lag_at_end"].(float64) != 0 || s["messages"].(float64) != 3*produced {
		t.Fatalf("perf fanout: summary %v", s)
	}
	if !strings.Contains(r.stderr, "worst lag") {
		t.Fatalf("perf fanout: no progress lines on stderr: %q", r.stderr)
	}
	t.Logf("perf fanout: %s", strings.TrimSpace(r.stdout))

	r = runCLI(t, "", "perf", "catchup", "--url", url, "--topic", topic, "--subscription", "cu", "--idle", "2s",
		"--duration", "60s", "--output", "json", "--cpuprofile", t.TempDir()+"/cpu.prof")
	if r.code != 0 {
		t.Fatalf("perf catchup: exit %d: %s", r.code, r.stderr)
	}
	lines = jsonLines(t, r.stdout)
	if len(lines) != 1 {
		t.Fatalf("perf catchup printed %d JSON lines: %q", len(lines), r.stdout)
	}
	c := lines[0]
	if c["messages"].(float64) != produced || c["bytes"].(float64) != 256*produced || c["mb_per_sec"].(float64) <= 0 {
		t.Fatalf("perf catchup read %v, want the %v messages of 256 bytes written: %v", c["messages"], produced, c)
	}

	for _, bad := range []struct{ flag, value string }{{"--subscriptions", "0"}, {"--receiver-queue", "0"}, {"--type", "shared"}} {
		r = runCLI(t, "", "perf", "fanout", "--url", url, "--topic", topic, bad.flag, bad.value)
		if r.code == 0 || !strings.Contains(r.stderr, bad.flag) {
			t.Fatalf("perf fanout %s %s: exit %d, stderr %q", bad.flag, bad.value, r.code, r.stderr)
		}
	}
	if r = runCLI(t, "", "perf", "catchup", "--url", url, "--topic", topic, "--idle", "0s"); r.code == 0 || !strings.Contains(r.stderr, "--idle") {
		t.Fatalf("perf catchup --idle 0s: exit %d, stderr %q", r.code, r.stderr)
	}
}
