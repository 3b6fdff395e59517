package check

import (
	"bytes"
	"cmp"
	"fmt"
	"html/template"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/meridianmq/meridian/internal/svgchart"
)

// The HTML report is one self-contained file: the verdict table, the
// examples, a timeline of inline SVG charts with the faults drawn as
// bands across every chart, and the list of faults. No script, no
// external CSS or fonts: it opens from disk or from a CI artifact.

// chart geometry (SVG user units).
const (
	svgW       = 1000.0
	svgLeft    = 64.0
	svgRight   = 16.0
	svgPanelH  = 150.0
	svgPanelGp = 50.0
	svgTop     = 30.0
	// maxTimeBuckets bounds the points of a line for long runs.
	maxTimeBuckets = 600
	// maxSeriesPerPanel keeps a panel legible: beyond it only the series
	// with the highest peaks are drawn.
	maxSeriesPerPanel = 8
	// maxFaultRows bounds the rows of fault labels above the charts.
	maxFaultRows = 6
	faultRowH    = 14.0
)

var palette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"}

// faultColor gives each fault family a band color.
func faultColor(kind string) string {
	switch {
	case strings.Contains(kind, "kill"), strings.Contains(kind, "restart"), strings.Contains(kind, "wipe"):
		return "#d62728"
	case strings.Contains(kind, "pause"):
		return "#ff9896"
	case strings.Contains(kind, "partition"), strings.Contains(kind, "cut"), strings.Contains(kind, "isolate"):
		return "#9467bd"
	case strings.Contains(kind, "disk"), strings.Contains(kind, "sync"), strings.Contains(kind, "full"),
		strings.Contains(kind, "corrupt"), strings.Contains(kind, "truncate"), strings.Contains(kind, "power"):
		return "#8c564b"
	case strings.Contains(kind, "clock"), strings.Contains(kind, "skew"):
		return "#bcbd22"
	}
	return "#ff7f0e" // network shaping: latency, bandwidth, drop, slow close
}

type chartSeries struct {
	Name   string
	Color  string
	Dash   bool
	Width  float64   // stroke width (0: 1.6)
	Values []float64 // NaN: no value (the line breaks)
}

type chartPanel struct {
	Title, Unit string
	Series      []chartSeries
}

// timeAxis maps the run's time span onto buckets.
type timeAxis struct {
	start time.Time
	span  time.Duration
	step  time.Duration
	n     int
}

func newTimeAxis(start, end time.Time) timeAxis {
	span := max(end.Sub(start), time.Second)
	step := time.Second
	if span/step > maxTimeBuckets {
		step = ((span/maxTimeBuckets + time.Second - 1) / time.Second) * time.Second
	}
	return timeAxis{start: start, span: span, step: step, n: int(span/step) + 1}
}

func (a timeAxis) bucket(t time.Time) int { return max(0, min(int(t.Sub(a.start)/a.step), a.n-1)) }

// rate counts records per bucket, per second.
func (a timeAxis) rate(ts []time.Time) []float64 {
	v := make([]float64, a.n)
	for _, t := range ts {
		v[a.bucket(t)]++
	}
	for i := range v {
		v[i] /= a.step.Seconds()
	}
	return v
}

// gauge places sampled values in buckets, each held until the next
// reading for up to 3 s (past that the sampler got no answer and the line
// breaks).
func (a timeAxis) gauge(ts []time.Time, vals []float64) []float64 {
	v := make([]float64, a.n)
	for i := range v {
		v[i] = math.NaN()
	}
	for i, t := range ts {
		v[a.bucket(t)] = vals[i]
	}
	hold := max(1, int(3*time.Second/a.step))
	last, age := math.NaN(), 0
	for i := range v {
		if math.IsNaN(v[i]) {
			if age++; age <= hold {
				v[i] = last
			}
		} else {
			last, age = v[i], 0
		}
	}
	return v
}

// timelinePanels builds the charts from the history.
func timelinePanels(x *hindex, ax timeAxis, samples []Record) []chartPanel {
	var panels []chartPanel
	// Throughput per region, computed from the records themselves.
	sent, acked, delivered, errs := map[string][]time.Time{}, map[string][]time.Time{}, map[string][]time.Time{}, map[string][]time.Time{}
	firstIn := map[string]map[msgKey]bool{}
	for _, r := range x.all {
		switch r.Kind {
		case KindSend:
			sent[r.Region] = append(sent[r.Region], r.T)
		case KindAck:
			acked[r.Region] = append(acked[r.Region], r.T)
		case KindDeliver:
			// The first delivery of each message in the region: every
			// message reaches several subscriptions, and their redeliveries
			// would drown the acknowledgements.
			if firstIn[r.Region] == nil {
				firstIn[r.Region] = map[msgKey]bool{}
			}
			if k := keyOf(r); !r.Unparsed && !firstIn[r.Region][k] {
				firstIn[r.Region][k] = true
				delivered[r.Region] = append(delivered[r.Region], r.T)
			}
		case KindFail, KindTimeout:
			errs[r.Region] = append(errs[r.Region], r.T)
		}
	}
	for _, reg := range x.regions {
		panels = append(panels, chartPanel{Title: "region " + reg + " throughput", Unit: "msg/s", Series: []chartSeries{
			{Name: "sent", Color: "#c7c7c7", Width: 4, Values: ax.rate(sent[reg])},
			{Name: "acknowledged", Color: "#1f77b4", Values: ax.rate(acked[reg])},
			{Name: "delivered in " + reg + " (first time, any subscription)", Color: "#2ca02c", Dash: true, Values: ax.rate(delivered[reg])},
		}})
	}
	// Replication and subscription backlogs from the samples: one line
	// per region and remote (or per region: the subscriptions' backlogs
	// of a region summed), summed over the topics.
	for _, g := range []struct{ name, title string }{
		{SeriesReplBacklog, "replication lag (region → remote)"},
		{SeriesSubBacklog, "subscription backlog, all subscriptions of a region"},
	} {
		type acc struct {
			ts   []time.Time
			vals []float64
		}
		byTopic := map[string]map[string]*acc{} // line label -> topic (and sub) -> readings
		var names []string
		for _, r := range samples {
			s := r.Sample
			if s.Name != g.name {
				continue
			}
			label := r.Region + " → " + s.Labels["remote"]
			part := cmp.Or(s.Labels["topic"], r.Topic)
			if g.name == SeriesSubBacklog {
				label = r.Region
				part += "\x00" + s.Labels["sub"]
			}
			if byTopic[label] == nil {
				byTopic[label] = map[string]*acc{}
				names = append(names, label)
			}
			a := byTopic[label][part]
			if a == nil {
				a = &acc{}
				byTopic[label][part] = a
			}
			a.ts, a.vals = append(a.ts, r.T), append(a.vals, s.Value)
		}
		if len(names) == 0 {
			continue
		}
		slices.Sort(names)
		p := chartPanel{Title: g.title, Unit: "messages"}
		if g.name == SeriesReplBacklog && len(byTopic[names[0]]) > 1 {
			p.Unit = "messages, all topics"
		}
		for i, n := range names {
			sum := make([]float64, ax.n)
			for j := range sum {
				sum[j] = math.NaN()
			}
			for _, a := range byTopic[n] {
				for j, v := range ax.gauge(a.ts, a.vals) {
					if !math.IsNaN(v) {
						if math.IsNaN(sum[j]) {
							sum[j] = 0
						}
						sum[j] += v
					}
				}
			}
			p.Series = append(p.Series, chartSeries{Name: n, Color: palette[i%len(palette)], Values: sum})
		}
		panels = append(panels, p)
	}
	// Errors: failed and timed-out sends per region.
	p := chartPanel{Title: "send errors (failed or timed out)", Unit: "per s"}
	for i, reg := range x.regions {
		p.Series = append(p.Series, chartSeries{Name: reg, Color: palette[i%len(palette)], Values: ax.rate(errs[reg])})
	}
	return append(panels, p)
}

// keepTopSeries keeps the maxSeriesPerPanel series with the highest
// peaks, in their original order.
func keepTopSeries(s []chartSeries) ([]chartSeries, int) {
	if len(s) <= maxSeriesPerPanel {
		return s, 0
	}
	peak := func(c chartSeries) float64 {
		m := 0.0
		for _, v := range c.Values {
			if !math.IsNaN(v) {
				m = max(m, v)
			}
		}
		return m
	}
	idx := make([]int, len(s))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(peak(s[b]), peak(s[a])) })
	idx = idx[:maxSeriesPerPanel]
	slices.Sort(idx)
	var out []chartSeries
	for _, i := range idx {
		out = append(out, s[i])
	}
	return out, len(s) - maxSeriesPerPanel
}

// svgTimeline draws the panels stacked on one time axis, the faults as
// labelled bands across all of them and the run's phases as dashed lines.
func svgTimeline(x *hindex, samples []Record) string {
	if x.first.IsZero() {
		return `<p>(no timeline: the history has no timestamps)</p>`
	}
	ax := newTimeAxis(x.first, x.last)
	panels := timelinePanels(x, ax, samples)
	plotW := svgW - svgLeft - svgRight
	X := func(t time.Time) float64 {
		return svgLeft + plotW*float64(t.Sub(ax.start))/float64(ax.span)
	}
	// Fault labels go in rows above the first panel, each in the first
	// row where it does not overlap the previous label.
	type flabel struct {
		x0, x1 float64
		row    int
		text   string
		color  string
	}
	var labels []flabel
	var rowEnd []float64
	for _, f := range x.faults {
		end := f.end
		if end.IsZero() {
			end = x.last
		}
		text := fmt.Sprintf("#%d %s %s", f.ID, f.Kind, strings.Join(f.Targets, ","))
		if len([]rune(text)) > 40 {
			text = string([]rune(text)[:39]) + "…"
		}
		x0, x1 := X(f.start), max(X(end), X(f.start)+2)
		w := 6.0 * float64(len([]rune(text)))
		lx := min(x0, svgW-svgRight-w)
		row := 0
		for row < len(rowEnd) && rowEnd[row] > lx {
			row++
		}
		if row == maxFaultRows {
			row = maxFaultRows - 1
		} else if row == len(rowEnd) {
			rowEnd = append(rowEnd, 0)
		}
		rowEnd[row] = lx + w + 6
		labels = append(labels, flabel{x0: x0, x1: x1, row: row, text: text, color: faultColor(f.Kind)})
	}
	top := svgTop + float64(len(rowEnd))*faultRowH + 16
	bottom := top + float64(len(panels))*(svgPanelH+svgPanelGp) - svgPanelGp
	height := bottom + 30 + 3*12 + 6
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`, svgW, height, svgW, height)
	fmt.Fprintf(&b, `<rect width="%.0f" height="%.0f" fill="#fff"/>`, svgW, height)
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-weight="bold" font-size="13">faults</text>`, svgLeft, svgTop-12)
	// Fault bands behind the charts, labels above them.
	for _, l := range labels {
		ly := svgTop + float64(l.row)*faultRowH
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="0.13"><title>%s</title></rect>`,
			l.x0, top, l.x1-l.x0, bottom-top, l.color, template.HTMLEscapeString(l.text))
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`, l.x0, l.x1, ly+5, ly+5, l.color)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="%s">%s</text>`, min(l.x0, svgW-svgRight-6*float64(len([]rune(l.text)))), ly+1, l.color, template.HTMLEscapeString(l.text))
	}
	for pi, p := range panels {
		pt := top + float64(pi)*(svgPanelH+svgPanelGp)
		series, dropped := keepTopSeries(p.Series)
		ymax := 0.0
		for _, s := range series {
			for _, v := range s.Values {
				if !math.IsNaN(v) {
					ymax = max(ymax, v)
				}
			}
		}
		ymax = svgchart.NiceCeil(ymax)
		Y := func(v float64) float64 { return pt + svgPanelH - svgPanelH*v/ymax }
		title := fmt.Sprintf("%s (%s)", p.Title, p.Unit)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" font-weight="bold" font-size="12">%s</text>`, svgLeft, pt-8, template.HTMLEscapeString(title))
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#bbb"/>`, svgLeft, pt, plotW, svgPanelH)
		for i := 0; i <= 4; i++ {
			v := ymax * float64(i) / 4
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%.1f" y="%.1f" text-anchor="end">%s</text>`,
				svgLeft, svgLeft+plotW, Y(v), Y(v), svgLeft-6, Y(v)+4, svgchart.TickLabel(v))
		}
		legendX := svgLeft + 7*float64(len([]rune(title))) + 24
		for _, s := range series {
			dash := ""
			if s.Dash {
				dash = ` stroke-dasharray="5 3"`
			}
			width := cmp.Or(s.Width, 1.6)
			var pts []string
			flush := func() {
				if len(pts) > 0 {
					fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="%.1f"%s points="%s"/>`, s.Color, width, dash, strings.Join(pts, " "))
				}
				pts = pts[:0]
			}
			for i, v := range s.Values {
				if math.IsNaN(v) {
					flush()
					continue
				}
				t := ax.start.Add(time.Duration(i)*ax.step + ax.step/2)
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", X(t), Y(v)))
			}
			flush()
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="2.5"%s/><text x="%.1f" y="%.1f">%s</text>`,
				legendX, legendX+16, pt-12, pt-12, s.Color, dash, legendX+20, pt-8, template.HTMLEscapeString(s.Name))
			legendX += 20 + 6.5*float64(len([]rune(s.Name))) + 16
		}
		if dropped > 0 {
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="#777">(+%d smaller series not drawn)</text>`, legendX, pt-8, dropped)
		}
	}
	// Phases: dashed grey lines across the charts, named under the time
	// axis in up to 3 rows so that close phases do not overlap.
	var phaseEnd [3]float64
	for _, ph := range x.phases {
		px := X(ph.T)
		w := 5.8 * float64(len([]rune(ph.Phase)))
		lx, anchor := px+2, "start"
		if lx+w > svgW {
			lx, anchor = px-2, "end"
		}
		left := lx
		if anchor == "end" {
			left = lx - w
		}
		row := 0
		for row < len(phaseEnd)-1 && phaseEnd[row] > left {
			row++
		}
		phaseEnd[row] = left + w + 4
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#555" stroke-dasharray="3 3"><title>%s</title></line><text x="%.1f" y="%.1f" fill="#555" font-size="10" text-anchor="%s">%s</text>`,
			px, px, top, bottom, template.HTMLEscapeString(ph.Phase), lx, bottom+30+float64(row)*12, anchor, template.HTMLEscapeString(ph.Phase))
	}
	// Time axis.
	secs := ax.span.Seconds()
	tick := svgchart.NiceCeil(secs / 10)
	for t := 0.0; t <= secs+1e-9; t += tick {
		tx := X(ax.start.Add(time.Duration(t * float64(time.Second))))
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#999"/><text x="%.1f" y="%.1f" text-anchor="middle">%gs</text>`,
			tx, tx, bottom, bottom+4, tx, bottom+16, t)
	}
	b.WriteString(`</svg>`)
	return b.String()
}

type htmlFault struct {
	ID                     int
	Kind, Targets, Detail  string
	Start, End, Err, Color string
}

var chaosHTML = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>meridian chaos{{if .Run}} {{.Run.ID}}{{end}}: {{if .V.Valid}}valid{{else}}INVALID{{end}}</title>
<style>
body{font-family:sans-serif;margin:24px;color:#222;max-width:1040px}
h1{font-size:20px} h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse} td,th{border:1px solid #ddd;padding:4px 10px;text-align:left;vertical-align:top}
th{background:#f5f5f5} .pass{color:#2ca02c;font-weight:bold} .fail{color:#d62728;font-weight:bold}
pre{background:#f8f8f8;padding:10px;overflow-x:auto} .sw{display:inline-block;width:10px;height:10px;margin-right:4px}
</style></head><body>
<h1>meridian chaos{{if .Run}} run <code>{{.Run.ID}}</code>{{end}}: {{if .V.Valid}}<span class="pass">VALID</span>{{else}}<span class="fail">INVALID</span>{{end}}</h1>
{{with .Run}}<p>Seed {{.Seed}}, regions {{range $i, $r := .Regions}}{{if $i}}, {{end}}{{$r}}{{end}}{{if .Scenario}}, scenario {{.Scenario}}{{end}}{{if .Faults}}, faults {{range $i, $f := .Faults}}{{if $i}}, {{end}}{{$f}}{{end}}{{end}}, quiet period {{.Quiet}}.</p>{{end}}
<h2>Verdict</h2>
<table><tr><th>checker</th><th>verdict</th><th>count</th><th>detail</th></tr>
{{range .V.Results}}<tr><td>{{.Name}}</td><td>{{if .Pass}}<span class="pass">PASS</span>{{else}}<span class="fail">FAIL</span>{{end}}</td><td>{{.Count}}</td><td>{{.Detail}}{{if .Examples}}<details{{if not .Pass}} open{{end}}><summary>examples</summary><ul>{{range .Examples}}<li><code>{{.}}</code></li>{{end}}</ul></details>{{end}}</td></tr>
{{end}}</table>
<h2>Timeline</h2>
{{.SVG}}
<p>Time from the first record, buckets of {{.Step}}. Bands: faults from injection to heal (red: kill/restart, pink: pause,
purple: partition or cut, orange: network shaping, brown: disk, olive: clock). Dashed grey lines: the run's phases.
Throughput is counted from the history per region (sends, acknowledgements by the acknowledging region, deliveries by the
consumer's region); lags and backlogs are the runner's samples, held up to 3 s (a gap: no answer).</p>
<h2>Faults</h2>
{{if .Faults}}<table><tr><th>#</th><th>fault</th><th>targets</th><th>how</th><th>start</th><th>end</th><th>error</th></tr>
{{range .Faults}}<tr><td>{{.ID}}</td><td><span class="sw" style="background:{{.Color}}"></span>{{.Kind}}</td><td>{{.Targets}}</td><td>{{.Detail}}</td><td>{{.Start}}</td><td>{{.End}}</td><td>{{.Err}}</td></tr>
{{end}}</table>{{else}}<p>No fault was injected.</p>{{end}}
<h2>Summary</h2>
<pre>{{.Text}}</pre>
<details><summary>JSON</summary><pre>{{.JSON}}</pre></details>
</body></html>
`))

// WriteHTML writes report.html: the verdict, a timeline of the faults,
// throughput, replication lag, backlogs and errors drawn from h, and the
// fault list.
func WriteHTML(w io.Writer, h History, v Verdict) error {
	x := index(h)
	var text, js bytes.Buffer
	if err := v.WriteText(&text); err != nil {
		return err
	}
	if err := v.WriteJSON(&js); err != nil {
		return err
	}
	off := func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return fmt.Sprintf("%.1f s", t.Sub(x.first).Seconds())
	}
	var faults []htmlFault
	for _, f := range x.faults {
		faults = append(faults, htmlFault{ID: f.ID, Kind: f.Kind, Targets: strings.Join(f.Targets, ", "), Detail: f.Detail,
			Start: off(f.start), End: off(f.end), Err: f.Err, Color: faultColor(f.Kind)})
	}
	run := v.Run
	if run == nil {
		run = x.run
	}
	return chaosHTML.Execute(w, map[string]any{
		"Run":    run,
		"V":      v,
		"SVG":    template.HTML(svgTimeline(x, x.samples)), //nolint:gosec // built from numbers and escaped labels
		"Step":   newTimeAxis(x.first, x.last).step.String(),
		"Faults": faults,
		"Text":   text.String(),
		"JSON":   js.String(),
	})
}
