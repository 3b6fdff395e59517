package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sample = `goos: linux
pkg: github.com/meridianmq/meridian/metadata
BenchmarkStore/put-2         	    2000	    612345 ns/op	  1.50 MB/s
BenchmarkCompare/jetstream/1024B-2   1   2000000000 ns/op   51234 msgs/s   4.2 p99-ms
PASS
{"messages":10,"msgs_per_sec":1234.5,"mb_per_sec":1.2,"p50_ms":1.1,"p99_ms":2.2,"p999_ms":3.3,"max_ms":4,"errors":0,"system":"meridian","load":"max"}
{"not":"perf"}
ok  	github.com/meridianmq/meridian/metadata	3.1s
`

func TestParse(t *testing.T) {
	recs, err := parse(strings.NewReader(sample), "perf")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, r := range recs {
		got[r.Name+" "+r.Unit] = r.Value
	}
	want := map[string]float64{
		"metadata.BenchmarkStore/put ns/op": 612345, "metadata.BenchmarkStore/put MB/s": 1.5,
		"metadata.BenchmarkCompare/jetstream/1024B ns/op": 2e9, "metadata.BenchmarkCompare/jetstream/1024B msgs/s": 51234,
		"metadata.BenchmarkCompare/jetstream/1024B p99-ms": 4.2,
		"perf/meridian/max/msgs_per_sec msgs/s":            1234.5, "perf/meridian/max/p99_ms ms": 2.2,
		"perf/meridian/max/p999_ms ms": 3.3, "perf/meridian/max/p50_ms ms": 1.1, "perf/meridian/max/mb_per_sec MB/s": 1.2,
		"perf/meridian/max/errors errors": 0,
	}
	if len(got) != len(want) {
		t.Fatalf("got %d records %v, want %d", len(got), got, len(want))
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s: got %v (present %v), want %v", k, g, ok, v)
		}
	}
}

func TestRunReplacesOnlyItsCommand(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "results.json")
	in := filepath.Join(dir, "a.txt")
	write := func(s string) {
		if err := os.WriteFile(in, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("BenchmarkA-2 10 5 ns/op\n")
	if _, err := run(in, out, "make a", "perf"); err != nil {
		t.Fatal(err)
	}
	write("BenchmarkB-2 10 7 ns/op\n")
	if _, err := run(in, out, "make b", "perf"); err != nil {
		t.Fatal(err)
	}
	write("BenchmarkA-2 10 6 ns/op\n")
	if _, err := run(in, out, "make a", "perf"); err != nil {
		t.Fatal(err)
	}
	var recs []Record
	b, _ := os.ReadFile(out)
	if err := json.Unmarshal(b, &recs); err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Name != "BenchmarkA" || recs[0].Value != 6 || recs[1].Name != "BenchmarkB" || recs[1].Value != 7 {
		t.Fatalf("records: %+v", recs)
	}
	if recs[0].Date == "" || recs[0].Machine == "" || recs[0].Command != "make a" {
		t.Fatalf("record lacks date/machine/command: %+v", recs[0])
	}
	write("nothing here\n")
	if _, err := run(in, out, "make a", "perf"); err == nil || !strings.Contains(err.Error(), "no benchmark result lines") {
		t.Fatalf("empty output: err %v", err)
	}
	if _, err := run(in, out, "", "perf"); err == nil || !strings.Contains(err.Error(), "-command") {
		t.Fatalf("no command: err %v", err)
	}
}
