package main

import (
	"strings"
	"testing"
)

// TestCLIConsumeNackDeadLetter: consume --nack-every 1 --max-redeliveries 2
// prints each message twice (redelivery counts 0 and 1), then the messages
// go to TOPIC-SUBSCRIPTION-DLQ, where a consume finds them with their
// origin properties; bad values of the new flags are one-line errors
// naming the flag.
func TestCLIConsumeNackDeadLetter(t *testing.T) {
	url := cliStandalone(t)
	const topic = "public/default/cli-dlq"
	if r := runCLI(t, "", "produce", "--url", url, "--topic", topic, "--count", "5", "--size", "16"); r.code != 0 {
		t.Fatalf("produce exit %d: %s", r.code, r.stderr)
	}
	r := runCLI(t, "", "consume", "--url", url, "--topic", topic, "--subscription", "s", "--from", "earliest", "--output", "json",
		"--nack-every", "1", "--max-redeliveries", "2", "--nack-delay", "50ms", "--idle", "5s")
	if r.code != 0 {
		t.Fatalf("consume exit %d: %s", r.code, r.stderr)
	}
	counts := map[string][]float64{}
	for _, l := range jsonLines(t, r.stdout) {
		rc, _ := l["redelivery_count"].(float64)
		counts[l["payload"].(string)] = append(counts[l["payload"].(string)], rc)
	}
	if len(counts) != 5 {
		t.Fatalf("consume printed %d distinct messages, want 5:\n%s", len(counts), r.stdout)
	}
	for pl, cs := range counts {
		if len(cs) != 2 || cs[0] != 0 || cs[1] != 1 {
			t.Fatalf("message %q printed with redelivery counts %v, want [0 1]", pl, cs)
		}
	}
	r = runCLI(t, "", "consume", "--url", url, "--topic", topic+"-s-DLQ", "--subscription", "check", "--from", "earliest", "--count", "5", "--output", "json", "--idle", "30s")
	if r.code != 0 {
		t.Fatalf("consume the DLQ: exit %d: %s", r.code, r.stderr)
	}
	for _, l := range jsonLines(t, r.stdout) {
		props, _ := l["properties"].(map[string]any)
		if props["REAL_TOPIC"] != topic || counts[l["payload"].(string)] == nil {
			t.Fatalf("dead-lettered line %v", l)
		}
	}
	// The original subscription is drained.
	r = runCLI(t, "", "consume", "--url", url, "--topic", topic, "--subscription", "s", "--count", "1", "--idle", "1s")
	if r.code == 0 || !strings.Contains(r.stderr, "no message") {
		t.Fatalf("drained subscription: exit %d, out %q, err %q", r.code, r.stdout, r.stderr)
	}

	for flag, args := range map[string][]string{
		"--nack-every":       {"--nack-every", "-1"},
		"--max-redeliveries": {"--max-redeliveries", "-2"},
		"--dlq-topic":        {"--dlq-topic", "public/default/d"},
		"--ack-timeout":      {"--ack-timeout", "10ms"},
		"--nack-delay":       {"--nack-delay", "0"},
	} {
		r := runCLI(t, "", append([]string{"consume", "--url", url, "--topic", topic, "--subscription", "s2"}, args...)...)
		lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
		if r.code == 0 || len(lines) != 1 || !strings.Contains(lines[0], flag) {
			t.Errorf("%v: exit %d, stderr %q: want a one-line error naming %s", args, r.code, r.stderr, flag)
		}
	}
	r = runCLI(t, "", "consume", "--url", url, "--topic", topic, "--subscription", "s2", "--ack-timeout", "bogus")
	if r.code == 0 || !strings.Contains(r.stderr, "--ack-timeout") {
		t.Errorf("--ack-timeout bogus: exit %d, stderr %q", r.code, r.stderr)
	}
}
