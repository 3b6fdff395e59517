package main

import (
	"strings"
	"testing"
)

// `meridian admin bookies scrub ID` asks the bookie to verify every entry
// it stores and prints what it found, as text or JSON.
func TestCLIAdminBookiesScrub(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a region (-short)")
	}
	url := cliStandalone(t)
	topic := "public/default/scrubbed"
	if r := runCLI(t, "", "produce", "--url", url, "--topic", topic, "--count", "20", "--size", "64", "--output", "json"); r.code != 0 {
		t.Fatalf("produce: exit %d: %s", r.code, r.stderr)
	}
	r := runCLI(t, "", "admin", "--url", url, "bookies", "scrub", "bookie-0", "--output", "json")
	if r.code != 0 {
		t.Fatalf("scrub json: exit %d: %s", r.code, r.stderr)
	}
	ls := jsonLines(t, r.stdout)
	if len(ls) != 1 || ls[0]["bookieId"] != "bookie-0" || ls[0]["corruptEntries"] != float64(0) {
		t.Fatalf("scrub json: %q", r.stdout)
	}
	if n, _ := ls[0]["entriesChecked"].(float64); n == 0 { // a JSON number (jsonout.go)
		t.Fatalf("scrub checked no entries after 20 messages: %q", r.stdout)
	}
	r = runCLI(t, "", "admin", "--url", url, "bookies", "scrub", "bookie-0")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "bookie bookie-0: ") || !strings.Contains(r.stdout, ", 0 corrupt\n") ||
		!strings.Contains(r.stdout, "damaged ledgers: none; marked under-replicated: none") {
		t.Fatalf("scrub text: exit %d: %q %s", r.code, r.stdout, r.stderr)
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"admin", "--url", url, "bookies", "scrub"}, "want 1 argument"},
		{[]string{"admin", "--url", url, "bookies", "scrub", "nope"}, "not registered"},
		{[]string{"admin", "--url", url, "bookies", "scrub", "bookie-0", "--timeout", "0s"}, "--timeout"},
	} {
		r := runCLI(t, "", bad.args...)
		if r.code == 0 || !strings.Contains(r.stderr, bad.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Fatalf("%v: exit %d, stderr %q (want one line mentioning %q)", bad.args, r.code, r.stderr, bad.want)
		}
	}
}
