package main

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestCLIPerfTopics(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a region (-short)")
	}
	url := cliStandalone(t)
	pid := strconv.Itoa(os.Getpid()) // any live process: the RSS line must appear
	r := runCLI(t, "", "perf", "topics", "--url", url, "--count", "20", "--concurrency", "4", "--prefix", "pt", "--pid", pid)
	if r.code != 0 {
		t.Fatalf("perf topics: exit %d: %s %s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "created 20 topics (0 failed)") || !strings.Contains(r.stdout, "bytes per topic") {
		t.Fatalf("perf topics output: %q", r.stdout)
	}
	for _, topic := range []string{"public/default/pt-0", "public/default/pt-19"} {
		l := runCLI(t, "", "admin", "--url", url, "subscriptions", "list", topic)
		if l.code != 0 || !containsLine(l.stdout, "s") {
			t.Fatalf("subscriptions of %s: exit %d: %q %q", topic, l.code, l.stdout, l.stderr)
		}
	}
	r = runCLI(t, "", "perf", "topics", "--url", url, "--count", "20", "--prefix", "pt", "--load-only")
	if r.code != 0 || !strings.Contains(r.stdout, "loaded 20 topics (0 failed)") {
		t.Fatalf("perf topics --load-only: exit %d: %q %q", r.code, r.stdout, r.stderr)
	}
	if r = runCLI(t, "", "perf", "topics", "--url", url, "--count", "0"); r.code == 0 || !strings.Contains(r.stderr, "--count") {
		t.Fatalf("--count 0 accepted: exit %d %q", r.code, r.stderr)
	}
}

func containsLine(out, want string) bool {
	for line := range strings.Lines(out) {
		if strings.TrimSpace(line) == want {
			return true
		}
	}
	return false
}
