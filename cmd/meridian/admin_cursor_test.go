package main

import (
	"strings"
	"testing"

	"github.com/meridianmq/meridian/client"
	"github.com/spf13/cobra"
)

func TestCursorPersistIntervalFlag(t *testing.T) {
	for _, c := range []struct {
		args    []string
		start   *int64
		want    *int64
		wantErr string
	}{
		{args: nil, start: cursorTestPtr(int64(7)), want: cursorTestPtr(int64(7))},
		{args: []string{"--cursor-persist-interval", "0"}, want: cursorTestPtr(int64(0))},
		{args: []string{"--cursor-persist-interval", "250ms"}, want: cursorTestPtr(int64(250))},
		{args: []string{"--cursor-persist-interval", "1h"}, want: cursorTestPtr(int64(3600000))},
		{args: []string{"--cursor-persist-interval", "-1s"}, start: cursorTestPtr(int64(5)), want: nil},
		{args: []string{"--cursor-persist-interval", "2h"}, wantErr: "must be in [0, 1h0m0s]"},
		{args: []string{"--cursor-persist-interval", "1500us"}, wantErr: "whole number of milliseconds"},
	} {
		f := &cursorPolicyFlags{}
		cmd := &cobra.Command{Use: "x"}
		f.register(cmd)
		if err := cmd.ParseFlags(c.args); err != nil {
			t.Fatal(err)
		}
		cur := &client.NamespacePolicies{CursorPersistIntervalMs: c.start}
		err := f.apply(cur)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), "--cursor-persist-interval") {
				t.Errorf("%v: err %v, want %q", c.args, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", c.args, err)
			continue
		}
		got := cur.CursorPersistIntervalMs
		if (got == nil) != (c.want == nil) || got != nil && *got != *c.want {
			t.Errorf("%v: cursor_persist_interval_ms %v, want %v", c.args, got, c.want)
		}
	}
}

func cursorTestPtr[T any](v T) *T { return &v }

func TestCLISetCursorPersistInterval(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a region (-short)")
	}
	url := cliStandalone(t)
	admin := func(args ...string) cliResult {
		return runCLI(t, "", append([]string{"admin", "--url", url}, args...)...)
	}
	if r := admin("namespaces", "set-policies", "public/default", "--cursor-persist-interval", "0"); r.code != 0 {
		t.Fatalf("set 0: exit %d: %s", r.code, r.stderr)
	}
	r := admin("namespaces", "policies", "public/default", "--output", "json")
	if p := jsonLines(t, r.stdout); len(p) != 1 || p[0]["cursorPersistIntervalMs"] != float64(0) {
		t.Fatalf("policies after --cursor-persist-interval 0: %q", r.stdout)
	}
	r = admin("namespaces", "set-policies", "public/default", "--cursor-persist-interval", "2h")
	if r.code == 0 || !strings.Contains(r.stderr, "--cursor-persist-interval") {
		t.Fatalf("2h accepted: exit %d, %q", r.code, r.stderr)
	}
	if r := admin("namespaces", "set-policies", "public/default", "--cursor-persist-interval", "-1s"); r.code != 0 {
		t.Fatalf("back to default: exit %d: %s", r.code, r.stderr)
	}
	r = admin("namespaces", "policies", "public/default", "--output", "json")
	if strings.Contains(r.stdout, "cursorPersistIntervalMs") {
		t.Fatalf("policy not cleared: %q", r.stdout)
	}
}
