package check

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// synthetic builds a 60 s two-region history: 50 msg/s per region, a
// partition from 15 s to 30 s during which b's replication lag grows, a
// broker kill from 35 s to 40 s with timed-out sends, phases, and the
// read-back. lose drops one acknowledged message from b's read-back.
func synthetic(lose bool) History {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	subs := []Subscription{{Region: "a", Topic: "t", Name: "rep", Type: "failover", Replicated: true}, {Region: "b", Topic: "t", Name: "loc", Type: "shared"}}
	recs := []Record{{T: at(0), Kind: KindRun, Run: &Run{ID: "demo", Seed: 42, Regions: []string{"a", "b"}, Faults: []string{"partition", "kill"},
		Topics: []string{"t"}, Subscriptions: subs, Quiet: 10 * time.Second}}, {T: at(0), Kind: KindPhase, Phase: "faults"}}
	var acked []Record
	seq := map[string]int64{}
	for ms := 0; ms < 50000; ms += 20 {
		for _, reg := range []string{"a", "b"} {
			p := "p-" + reg
			seq[p]++
			m := Record{Region: reg, Origin: reg, Producer: p, Seq: seq[p], Topic: "t"}
			s := m
			s.T, s.Kind = at(ms), KindSend
			recs = append(recs, s)
			c := m
			c.T, c.Kind = at(ms+5), KindAck
			if reg == "a" && ms >= 35000 && ms < 40000 {
				c.T, c.Kind, c.Err = at(ms+3000), KindTimeout, "deadline exceeded"
			}
			recs = append(recs, c)
			if c.Kind == KindAck {
				acked = append(acked, c)
			}
		}
	}
	for _, f := range []struct {
		id         int
		kind       string
		targets    []string
		start, end int
	}{{1, "partition", []string{"a", "b"}, 15000, 30000}, {2, "kill", []string{"a/broker-0"}, 35000, 40000}, {3, "latency", []string{"a->b"}, 42000, 47000}} {
		fa := &Fault{ID: f.id, Kind: f.kind, Targets: f.targets, Detail: "demo"}
		recs = append(recs, Record{T: at(f.start), Kind: KindFaultStart, Fault: fa}, Record{T: at(f.end), Kind: KindFaultEnd, Fault: fa})
	}
	for s := 0; s <= 60; s++ {
		lag := 0.0
		if s >= 15 && s < 30 {
			lag = float64(s-15) * 50
		} else if s >= 30 && s < 36 {
			lag = float64(36-s) * 120
		}
		recs = append(recs,
			Record{T: at(s * 1000), Kind: KindSample, Region: "a", Sample: &Sample{Name: SeriesReplBacklog, Labels: map[string]string{"remote": "b", "topic": "t"}, Value: lag / 2}},
			Record{T: at(s * 1000), Kind: KindSample, Region: "a", Sample: &Sample{Name: SeriesReplBacklog, Labels: map[string]string{"remote": "b", "topic": "t2"}, Value: lag / 2}},
			Record{T: at(s * 1000), Kind: KindSample, Region: "a", Sample: &Sample{Name: SeriesSubBacklog, Labels: map[string]string{"sub": "rep", "topic": "t"}, Value: lag / 3}},
			Record{T: at(s * 1000), Kind: KindSample, Region: "b", Sample: &Sample{Name: SeriesReplBacklog, Labels: map[string]string{"remote": "a"}, Value: lag / 2}})
	}
	for _, a := range acked {
		for _, reg := range []string{"a", "b"} {
			d := a
			d.Kind, d.Region, d.Sub, d.SubType, d.Replicated = KindDeliver, reg, "rep", "failover", true
			d.T = a.T.Add(30 * time.Millisecond)
			if reg != a.Region && a.T.After(at(15000)) && a.T.Before(at(30000)) {
				d.T = at(30000 + int(a.T.Sub(at(15000)).Milliseconds())/1000)
			}
			recs = append(recs, d)
		}
	}
	recs = append(recs, Record{T: at(50000), Kind: KindPhase, Phase: "heal"}, Record{T: at(51000), Kind: KindPhase, Phase: "quiet"},
		Record{T: at(60000), Kind: KindPhase, Phase: "readback"})
	for i, a := range acked {
		for _, reg := range []string{"a", "b"} {
			if lose && reg == "b" && i == 100 {
				continue
			}
			r := a
			r.Kind, r.Region, r.T = KindRead, reg, at(60100)
			recs = append(recs, r)
		}
	}
	recs = append(recs, Record{T: at(60500), Kind: KindPhase, Phase: "done"})
	// Records are written as they happen: sort by time, stably.
	sortRecords(recs)
	return History{Records: recs}
}

func sortRecords(r []Record) {
	slices.SortStableFunc(r, func(a, b Record) int { return a.T.Compare(b.T) })
}

func TestWriteHTML(t *testing.T) {
	h := synthetic(true)
	v := Check(h, Options{})
	if v.Valid {
		t.Fatal("a message lost from b's read-back: valid")
	}
	// The message missing from b's read-back was delivered there: not
	// lost, but the regions' logs diverge.
	if r, _ := v.Result(CheckLost); !r.Pass {
		t.Fatalf("lost %+v", r)
	}
	for _, name := range []string{CheckUnexpected, CheckDuplicated, CheckOrder, CheckStuck} {
		if r, _ := v.Result(name); !r.Pass {
			t.Fatalf("%s %+v", name, r)
		}
	}
	if r, _ := v.Result(CheckDivergence); r.Pass || r.Count != 1 {
		t.Fatalf("divergence %+v", r)
	}
	var b bytes.Buffer
	if err := WriteHTML(&b, h, v); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	for _, want := range []string{"INVALID", "<svg", "#1 partition a,b", "#2 kill a/broker-0", "region a throughput", "region b throughput",
		"replication lag", "messages, all topics", "subscription backlog, all subscriptions of a region", "send errors", "divergence", "background:#9467bd"} {
		if !strings.Contains(html, want) {
			t.Fatalf("report.html lacks %q", want)
		}
	}
	if strings.Contains(html, "ZgotmplZ") || strings.Contains(html, "NaN") {
		t.Fatal("report.html holds an unsafe or NaN value")
	}
	// Every polyline point is inside the SVG.
	for _, m := range regexp.MustCompile(`points="([^"]*)"`).FindAllStringSubmatch(html, -1) {
		for _, p := range strings.Fields(m[1]) {
			var x, y float64
			if _, err := fmt.Sscanf(p, "%g,%g", &x, &y); err != nil || x < svgLeft-1 || x > svgW-svgRight+1 {
				t.Fatalf("point %q outside the plot", p)
			}
		}
	}
	if dir := os.Getenv("CHAOS_REPORT_DIR"); dir != "" {
		svg := regexp.MustCompile(`(?s)<svg.*</svg>`).FindString(html)
		if err := os.WriteFile(dir+"/report.html", b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dir+"/timeline.svg", []byte(svg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWriteHTMLEmptyHistory(t *testing.T) {
	var b bytes.Buffer
	if err := WriteHTML(&b, History{}, Check(History{}, Options{})); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "no timeline") {
		t.Fatal("empty history: no placeholder")
	}
}

// BenchmarkCheck checks the 60 s synthetic history (about 60k records);
// the work is linear in the records.
func BenchmarkCheck(b *testing.B) {
	h := synthetic(false)
	b.ReportMetric(float64(len(h.Records)), "records")
	for b.Loop() {
		if v := Check(h, Options{}); !v.Valid {
			b.Fatal("synthetic history invalid")
		}
	}
}
