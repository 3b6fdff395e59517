// Command record turns benchmark output into records of bench/results.json,
// one record per figure, so that `make bench` rewrites the file and a
// regression shows in its diff.
//
// It reads benchmark output (-in, default stdin) and understands two kinds
// of line:
//
//   - `go test -bench` result lines, "BenchmarkName-N  iters  v1 unit1  v2 unit2 ...":
//     one record per value/unit pair, named after the benchmark (the -N
//     GOMAXPROCS suffix removed), prefixed by its package ("pkg:" line,
//     module path removed) as "bookie/ledger.BenchmarkX";
//   - JSON objects with perf's summary fields (msgs_per_sec, p50_ms, p99_ms,
//     p999_ms, mb_per_sec), as `meridian perf --output json`, bench/jsbench
//     and bench/cluster-vs-jetstream.sh's BENCH_JSON write them: one record
//     per field, named "-prefix/system/load/field" (system and load when the
//     object has them).
//
// Every record carries the -command that produced the output, the date and
// the machine (CPU model, cores, load average when recorded). The records of
// the same command already in -o are replaced; the others are kept; the file
// is written sorted by command and name.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Record is one figure of one benchmark run.
type Record struct {
	Name    string  `json:"name"`
	Value   float64 `json:"value"`
	Unit    string  `json:"unit"`
	Command string  `json:"command"`
	Date    string  `json:"date"`
	Machine string  `json:"machine"`
	Load    string  `json:"load,omitempty"`
}

// module is removed from the front of package paths in names.
const module = "github.com/meridianmq/meridian"

var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+(\d+)\s+(.+)$`)

// parseBench returns the records of one `go test -bench` result line, or
// nil if line is not one.
func parseBench(line string) []Record {
	m := benchLine.FindStringSubmatch(strings.TrimSpace(line))
	if m == nil {
		return nil
	}
	f := strings.Fields(m[3])
	var out []Record
	for i := 0; i+1 < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			break
		}
		out = append(out, Record{Name: m[1], Value: v, Unit: f[i+1]})
	}
	return out
}

// perfFields are the perf summary fields recorded, with their units.
var perfFields = []struct{ key, unit string }{
	{"msgs_per_sec", "msgs/s"}, {"mb_per_sec", "MB/s"}, {"p50_ms", "ms"}, {"p99_ms", "ms"}, {"p999_ms", "ms"}, {"errors", "errors"},
}

// parsePerf returns the records of one perf JSON summary line, or nil.
func parsePerf(line, prefix string) []Record {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "{") {
		return nil
	}
	var m map[string]any
	if json.Unmarshal([]byte(line), &m) != nil {
		return nil
	}
	if _, ok := m["msgs_per_sec"]; !ok {
		return nil
	}
	name := prefix
	for _, k := range []string{"system", "load"} {
		if s, ok := m[k].(string); ok && s != "" {
			name += "/" + s
		}
	}
	var out []Record
	for _, f := range perfFields {
		if v, ok := m[f.key].(float64); ok {
			out = append(out, Record{Name: name + "/" + f.key, Value: v, Unit: f.unit})
		}
	}
	return out
}

// parse reads benchmark output and returns its records.
func parse(r io.Reader, prefix string) ([]Record, error) {
	var out []Record
	pkg := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "pkg: "); ok {
			pkg = strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(p), module), "/")
			continue
		}
		if recs := parseBench(sc.Text()); recs != nil {
			for i := range recs {
				if pkg != "" {
					recs[i].Name = pkg + "." + recs[i].Name
				}
			}
			out = append(out, recs...)
		} else if recs := parsePerf(sc.Text(), prefix); recs != nil {
			out = append(out, recs...)
		}
	}
	return out, sc.Err()
}

// machine describes this machine: CPU model, cores, OS/arch.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for l := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d cores, %s/%s", model, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH)
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// merge replaces old's records of command by recs and sorts the result.
func merge(old, recs []Record, command string) []Record {
	out := make([]Record, 0, len(old)+len(recs))
	for _, r := range old {
		if r.Command != command {
			out = append(out, r)
		}
	}
	out = append(out, recs...)
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Command != out[j].Command {
			return out[i].Command < out[j].Command
		}
		return out[i].Name+" "+out[i].Unit < out[j].Name+" "+out[j].Unit
	})
	return out
}

func run(in, outPath, command, prefix string) (int, error) {
	if command == "" {
		return 0, errors.New("-command: required (the command whose output this is)")
	}
	var r io.Reader = os.Stdin
	if in != "" && in != "-" {
		f, err := os.Open(in)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		r = f
	}
	recs, err := parse(r, prefix)
	if err != nil {
		return 0, err
	}
	if len(recs) == 0 {
		return 0, fmt.Errorf("-in %s: no benchmark result lines", in)
	}
	date, mach, load := time.Now().UTC().Format(time.RFC3339), machine(), loadAvg()
	for i := range recs {
		recs[i].Command, recs[i].Date, recs[i].Machine, recs[i].Load = command, date, mach, load
	}
	var old []Record
	if b, err := os.ReadFile(outPath); err == nil {
		if err := json.Unmarshal(b, &old); err != nil {
			return 0, fmt.Errorf("-o %s: not a results file: %w", outPath, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	b, err := json.MarshalIndent(merge(old, recs, command), "", "  ")
	if err != nil {
		return 0, err
	}
	tmp := outPath + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return 0, err
	}
	return len(recs), os.Rename(tmp, outPath)
}

func main() {
	in := flag.String("in", "-", "benchmark output to read (- = stdin)")
	out := flag.String("o", "bench/results.json", "results file to update")
	command := flag.String("command", "", "the command that produced the output (required)")
	prefix := flag.String("prefix", "perf", "name prefix of perf JSON summaries")
	flag.Parse()
	n, err := run(*in, *out, *command, *prefix)
	if err != nil {
		slog.Error("record failed", "err", err)
		os.Exit(1)
	}
	slog.Info("recorded", "records", n, "command", *command, "file", *out)
}
