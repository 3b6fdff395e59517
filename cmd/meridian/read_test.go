package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// payloadsOf returns the payload field of JSON lines.
func payloadsOf(t *testing.T, stdout string) []string {
	t.Helper()
	var out []string
	for _, l := range jsonLines(t, stdout) {
		p, _ := l["payload"].(string)
		out = append(out, p)
	}
	return out
}

func seqText(prefix string, from, to int) string {
	var s []string
	for i := from; i <= to; i++ {
		s = append(s, fmt.Sprintf("%s%d", prefix, i))
	}
	return strings.Join(s, ",")
}

// TestCLIConsumeFromAndRead: `consume --from` and `read --from` with a
// time, a relative time, a message ID and an origin position; `admin
// topics reset-cursor`; bad positions name the flag and change nothing.
func TestCLIConsumeFromAndRead(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a region (-short)")
	}
	url := cliStandalone(t)
	const topic = "public/default/replay"
	produce := func(lines string) []map[string]any {
		t.Helper()
		r := runCLI(t, lines, "produce", "--url", url, "--topic", topic, "--batch-max-messages", "1", "--output", "json")
		if r.code != 0 {
			t.Fatalf("produce exit %d: %s", r.code, r.stderr)
		}
		return jsonLines(t, r.stdout)
	}
	first := produce(strings.ReplaceAll(seqText("a", 0, 9), ",", "\n") + "\n")
	time.Sleep(50 * time.Millisecond)
	at := time.Now().UTC().Format(time.RFC3339Nano)
	time.Sleep(50 * time.Millisecond)
	produce(strings.ReplaceAll(seqText("b", 0, 9), ",", "\n") + "\n")
	idA5 := first[5]["id"].(string)
	l5 := strings.Join(strings.Split(idA5, ":")[:2], ":")

	read := func(args ...string) (string, cliResult) {
		t.Helper()
		r := runCLI(t, "", append([]string{"read", topic, "--url", url, "--output", "json", "--idle", "2s"}, args...)...)
		return strings.Join(payloadsOf(t, r.stdout), ","), r
	}
	if got, r := read("--from", at, "-n", "10"); got != seqText("b", 0, 9) || r.code != 0 {
		t.Fatalf("read --from TIME: %q (exit %d, %s)", got, r.code, r.stderr)
	}
	if got, r := read("--from", "earliest", "-n", "20"); got != seqText("a", 0, 9)+","+seqText("b", 0, 9) || r.code != 0 {
		t.Fatalf("read --from earliest: %q (exit %d, %s)", got, r.code, r.stderr)
	}
	if got, r := read("--from", "-1h"); got != seqText("a", 0, 9)+","+seqText("b", 0, 9) || r.code != 0 {
		t.Fatalf("read --from -1h (until idle): %q (exit %d, %s)", got, r.code, r.stderr)
	}
	if got, r := read("--from", l5, "-n", "15"); got != seqText("a", 5, 9)+","+seqText("b", 0, 9) || r.code != 0 {
		t.Fatalf("read --from ID: %q (exit %d, %s)", got, r.code, r.stderr)
	}
	// The origin position of a local message is its ID, with its region.
	lines := jsonLines(t, runCLI(t, "", "read", topic, "--url", url, "--output", "json", "--from", "earliest", "-n", "1").stdout)
	region, _ := lines[0]["origin_region"].(string)
	if region == "" || lines[0]["origin_seq"] == nil {
		t.Fatalf("read --output json without origin_region/origin_seq: %v", lines[0])
	}
	origin := "origin:" + region + ":" + l5
	if got, r := read("--from", origin, "-n", "15"); got != seqText("a", 5, 9)+","+seqText("b", 0, 9) || r.code != 0 {
		t.Fatalf("read --from %s: %q (exit %d, %s)", origin, got, r.code, r.stderr)
	}
	// consume --from creates the subscription there; acknowledged, then reset.
	r := runCLI(t, "", "consume", "--url", url, "--topic", topic, "--subscription", "s", "--from", at, "--count", "10", "--output", "json")
	if got := strings.Join(payloadsOf(t, r.stdout), ","); r.code != 0 || got != seqText("b", 0, 9) {
		t.Fatalf("consume --from TIME: %q (exit %d, %s)", got, r.code, r.stderr)
	}
	r = runCLI(t, "", "consume", "--url", url, "--topic", topic, "--subscription", "o", "--from", origin, "--count", "15", "--output", "json")
	if got := strings.Join(payloadsOf(t, r.stdout), ","); r.code != 0 || got != seqText("a", 5, 9)+","+seqText("b", 0, 9) {
		t.Fatalf("consume --from origin: %q (exit %d, %s)", got, r.code, r.stderr)
	}
	for _, reset := range [][]string{{"--origin", region + ":" + l5}, {"--id", l5}} {
		r = runCLI(t, "", append([]string{"admin", "--url", url, "topics", "reset-cursor", topic, "-s", "s"}, reset...)...)
		if r.code != 0 || !strings.Contains(r.stdout, "reset cursor") {
			t.Fatalf("reset-cursor %v: exit %d, %q %q", reset, r.code, r.stdout, r.stderr)
		}
		r = runCLI(t, "", "consume", "--url", url, "--topic", topic, "--subscription", "s", "--count", "15", "--output", "json")
		if got := strings.Join(payloadsOf(t, r.stdout), ","); r.code != 0 || got != seqText("a", 5, 9)+","+seqText("b", 0, 9) {
			t.Fatalf("consume after reset-cursor %v: %q (exit %d, %s)", reset, got, r.code, r.stderr)
		}
	}
	r = runCLI(t, "", "admin", "--url", url, "topics", "reset-cursor", topic, "-s", "s", "--time", at)
	if r.code != 0 {
		t.Fatalf("reset-cursor --time: exit %d, %s", r.code, r.stderr)
	}
	r = runCLI(t, "", "consume", "--url", url, "--topic", topic, "--subscription", "s", "--count", "10", "--output", "json")
	if got := strings.Join(payloadsOf(t, r.stdout), ","); r.code != 0 || got != seqText("b", 0, 9) {
		t.Fatalf("consume after reset-cursor --time: %q (exit %d, %s)", got, r.code, r.stderr)
	}

	// Bad input: one line naming the flag or the field; nothing changes.
	for _, tc := range []struct {
		args    []string
		mention string
	}{
		{[]string{"read", topic, "--url", url, "--from", "origin:a:1"}, "--from"},
		{[]string{"read", topic, "--url", url, "--from", "12:x"}, "--from"},
		{[]string{"read", topic, "--url", url, "--from", "tomorrow"}, "--from"},
		{[]string{"read", topic, "--url", url, "--from", "origin:nowhere:1:2"}, "start.origin"},
		{[]string{"consume", "--url", url, "--topic", topic, "--subscription", "new", "--from", "origin:nowhere:1:2"}, "start.origin"},
		{[]string{"consume", "--url", url, "--topic", topic, "--subscription", "new", "--from", "-xyz"}, "--from"},
		{[]string{"admin", "--url", url, "topics", "reset-cursor", topic, "-s", "s", "--origin", "nowhere:1:2"}, "position.origin"},
		{[]string{"admin", "--url", url, "topics", "reset-cursor", topic, "-s", "s", "--origin", "nowhere:1"}, "--origin"},
		{[]string{"admin", "--url", url, "topics", "reset-cursor", topic, "-s", "s", "--time", "1:2"}, "--time"},
		{[]string{"admin", "--url", url, "topics", "reset-cursor", topic, "-s", "s", "--id", "x"}, "--id"},
		{[]string{"admin", "--url", url, "topics", "reset-cursor", topic, "-s", "s", "--id", "1:2", "--time", "-1m"}, "exactly one"},
		{[]string{"admin", "--url", url, "topics", "reset-cursor", topic, "--id", "1:2"}, "--subscription"},
		// Checked before connecting: no broker at this address.
		{[]string{"admin", "--url", "127.0.0.1:1", "topics", "reset-cursor", topic, "-s", "s", "--time", "soon"}, "--time"},
		{[]string{"read", topic, "--url", "127.0.0.1:1", "--from", "origin:a:b:c"}, "--from"},
	} {
		r := runCLI(t, "", tc.args...)
		lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
		if r.code == 0 || len(lines) != 1 || !strings.HasPrefix(lines[0], "meridian: ") || !strings.Contains(r.stderr, tc.mention) {
			t.Errorf("%v: exit %d, stderr %q (want one line mentioning %q)", tc.args, r.code, r.stderr, tc.mention)
		}
	}
	// Nothing changed: "new" was not created, "s" is still drained.
	r = runCLI(t, "", "admin", "--url", url, "subscriptions", "list", topic)
	if strings.Contains(r.stdout, "new") {
		t.Fatalf("a refused start created subscription new: %q", r.stdout)
	}
	r = runCLI(t, "", "consume", "--url", url, "--topic", topic, "--subscription", "s", "--count", "1", "--idle", "1s")
	if r.code == 0 || !strings.Contains(r.stderr, "no message") {
		t.Fatalf("subscription s moved by a refused reset: exit %d, out %q, err %q", r.code, r.stdout, r.stderr)
	}
}
