package main

import (
	"strings"
	"testing"
)

func TestCLIPerfJSONSummary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a region (-short)")
	}
	url := cliStandalone(t)
	for _, mode := range []string{"produce", "e2e", "consume"} {
		r := runCLI(t, "", "perf", mode, "--url", url, "--topic", "public/default/perf", "--rate", "500", "--size", "256",
			"--duration", "2s", "--producers", "2", "--output", "json", "--subscription", "perf-"+mode, "--drain", "3s")
		if r.code != 0 {
			t.Fatalf("perf %s: exit %d: %s", mode, r.code, r.stderr)
		}
		lines := jsonLines(t, r.stdout)
		if len(lines) != 1 {
			t.Fatalf("perf %s printed %d JSON lines: %q", mode, len(lines), r.stdout)
		}
		s := lines[0]
		for _, k := range []string{"messages", "msgs_per_sec", "mb_per_sec", "p50_ms", "p99_ms", "p999_ms", "max_ms", "cpu_pressure_pct", "sched_p99_ms"} {
			if _, ok := s[k].(float64); !ok {
				t.Fatalf("perf %s: summary lacks %q: %v", mode, k, s)
			}
		}
		if s["messages"].(float64) < 100 || s["p50_ms"].(float64) > s["max_ms"].(float64) {
			t.Fatalf("perf %s: implausible summary %v", mode, s)
		}
		if !strings.Contains(r.stderr, "msg/s") {
			t.Fatalf("perf %s: no progress lines on stderr: %q", mode, r.stderr)
		}
		t.Logf("perf %s: %s", mode, strings.TrimSpace(r.stdout))
	}
}
