package main

import (
	"bufio"
	"math"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// loadProbe measures how contended the machine was during a perf run, so
// a latency figure can be read against it: the share of wall time some
// runnable task waited for a CPU (Linux PSI, /proc/pressure/cpu "some"),
// and this process's own goroutine scheduling latency (runtime/metrics).
// On a shared 2-core machine the tail latency follows these two closely.
type loadProbe struct {
	start      time.Time
	psiStartUs int64 // -1: PSI not available
}

func newLoadProbe() *loadProbe {
	return &loadProbe{start: time.Now(), psiStartUs: cpuPressureTotalUs()}
}

// cpuPressurePct is the percentage of wall time since the probe started
// during which at least one runnable task waited for a CPU; -1 when the
// kernel does not report pressure.
func (p *loadProbe) cpuPressurePct() float64 {
	if p == nil {
		return -1
	}
	end := cpuPressureTotalUs()
	el := time.Since(p.start).Microseconds()
	if p.psiStartUs < 0 || end < 0 || el <= 0 {
		return -1
	}
	return math.Round(float64(end-p.psiStartUs)/float64(el)*1000) / 10
}

// cpuPressureTotalUs reads the cumulative "some" stall time in
// microseconds from /proc/pressure/cpu, or -1.
func cpuPressureTotalUs() int64 {
	f, err := os.Open("/proc/pressure/cpu")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "some ") {
			continue
		}
		for _, field := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(field, "total="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return -1
				}
				return n
			}
		}
	}
	return -1
}

// schedLatencyQuantileMs is quantile q (0..1) of the time this process's
// goroutines spent runnable before running, since the process started,
// in milliseconds (the upper bound of the bucket holding q; -1 if the
// runtime does not report it).
func schedLatencyQuantileMs(q float64) float64 {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return -1
	}
	h := s[0].Value.Float64Histogram()
	var total uint64
	for _, c := range h.Counts {
		total += c
	}
	if total == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i, c := range h.Counts {
		seen += c
		if seen >= want {
			hi := h.Buckets[i+1]
			if math.IsInf(hi, 1) {
				hi = h.Buckets[i]
			}
			return math.Round(hi*1e6) / 1e3
		}
	}
	return -1
}
