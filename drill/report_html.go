package drill

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

// The HTML report is one self-contained file: the text summary, the
// figures, and an inline SVG timeline. No script, no external CSS or fonts,
// so it opens from disk, from a CI artifact or from a mail attachment.

// chart geometry (SVG user units).
const (
	chartW      = 960.0
	chartLeft   = 70.0
	chartRight  = 20.0
	panelH      = 180.0
	panelGap    = 46.0
	chartTop    = 24.0
	maxBuckets  = 600 // bounds the SVG's size for long drills
	minBucketMs = 100
	// maxLabelRows bounds the rows of marker labels under the chart.
	maxLabelRows = 5
)

type series struct {
	Name   string
	Color  string
	Values []float64
}

type panel struct {
	Title  string
	Unit   string
	Series []series
}

// timelineStep picks a bucket width: at least 100ms, at most maxBuckets
// buckets.
func timelineStep(span time.Duration) time.Duration {
	step := max(time.Duration(minBucketMs)*time.Millisecond, span/maxBuckets)
	return step.Round(time.Millisecond)
}

// markerStyle gives each event kind a color and a label.
func markerStyle(k EventKind) (color, label string, ok bool) {
	switch k {
	case EventFault:
		return "#d62728", "fault", true
	case EventSwitchCommand:
		return "#d62728", "switch command", true
	case EventSwitch:
		return "#1f77b4", "switch", true
	case EventHeal:
		return "#2ca02c", "heal", true
	case EventStopSend:
		return "#7f7f7f", "producers stop", true
	}
	return "", "", false
}

// movingAvg averages each value with the win-1 before it.
func movingAvg(v []float64, win int) []float64 {
	out := make([]float64, len(v))
	sum := 0.0
	for i, x := range v {
		sum += x
		if i >= win {
			sum -= v[i-win]
		}
		out[i] = sum / float64(min(i+1, win))
	}
	return out
}

// svgTimeline draws the panels over the drill's span with the event
// markers.
func svgTimeline(h History, rep *Report) string {
	span := h.End.Sub(h.Start)
	if span <= 0 {
		return `<p>(no timeline: the drill recorded nothing)</p>`
	}
	step := timelineStep(span)
	bk := Timeline(h, step)
	var ack, del, dup, notIn, undel []float64
	for _, b := range bk {
		ack = append(ack, b.AckedPerSec)
		del = append(del, b.DeliveredPerSec)
		dup = append(dup, b.DuplicatesPerSec)
		notIn = append(notIn, float64(b.NotInTo))
		undel = append(undel, float64(b.Undelivered))
	}
	// Rates are averaged over about a second: per-bucket counts at a low
	// rate alias into a sawtooth.
	win := max(1, int(time.Second/step))
	panels := []panel{
		{Title: "throughput", Unit: "msg/s, 1s average", Series: []series{
			{Name: "acknowledged", Color: "#1f77b4", Values: movingAvg(ack, win)},
			{Name: "delivered (first time)", Color: "#2ca02c", Values: movingAvg(del, win)},
			{Name: "delivered again (duplicates)", Color: "#d62728", Values: movingAvg(dup, win)},
		}},
		{Title: "lag", Unit: "messages", Series: []series{
			{Name: fmt.Sprintf("acknowledged in %s, not yet seen in %s", h.From, h.To), Color: "#ff7f0e", Values: notIn},
			{Name: "acknowledged, not yet delivered", Color: "#9467bd", Values: undel},
		}},
	}
	// Samples (the brokers' replication lags) get one panel per unit, one
	// series per name, each value held until the next reading.
	var units []string
	for _, s := range h.Samples {
		if !slices.Contains(units, s.Unit) {
			units = append(units, s.Unit)
		}
	}
	colors := []string{"#8c564b", "#e377c2", "#17becf", "#bcbd22"}
	for _, u := range units {
		var names []string
		for _, s := range h.Samples {
			if s.Unit == u && !slices.Contains(names, s.Name) {
				names = append(names, s.Name)
			}
		}
		p := panel{Title: "broker readings", Unit: u}
		for i, n := range names {
			vals := make([]float64, len(bk))
			for j := range vals {
				vals[j] = math.NaN()
			}
			for _, s := range h.Samples {
				if s.Name == n {
					j := max(0, min(int(s.At.Sub(h.Start)/step), len(bk)-1))
					vals[j] = s.Value
				}
			}
			// Hold a reading for up to 2s: past that the broker did not
			// answer (a dead or cut region) and the line breaks.
			hold := max(1, int(2*time.Second/step))
			last, age := math.NaN(), 0
			for j := range vals {
				if math.IsNaN(vals[j]) {
					if age++; age <= hold {
						vals[j] = last
					}
				} else {
					last, age = vals[j], 0
				}
			}
			p.Series = append(p.Series, series{Name: n, Color: colors[i%len(colors)], Values: vals})
		}
		panels = append(panels, p)
	}

	plotW := chartW - chartLeft - chartRight
	// Room under the axis for up to maxLabelRows rows of marker labels.
	height := chartTop + float64(len(panels))*(panelH+panelGap) - panelGap + 30 + maxLabelRows*13 + 8
	x := func(ms float64) float64 { return chartLeft + plotW*ms/float64(span.Milliseconds()) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`, chartW, height, chartW, height)
	for pi, p := range panels {
		top := chartTop + float64(pi)*(panelH+panelGap)
		ymax := 0.0
		for _, s := range p.Series {
			for _, v := range s.Values {
				if !math.IsNaN(v) {
					ymax = max(ymax, v)
				}
			}
		}
		ymax = svgchart.NiceCeil(ymax)
		y := func(v float64) float64 { return top + panelH - panelH*v/ymax }
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" font-weight="bold">%s (%s)</text>`, chartLeft, top-8, template.HTMLEscapeString(p.Title), template.HTMLEscapeString(p.Unit))
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#ccc"/>`, chartLeft, top, plotW, panelH)
		for i := 0; i <= 4; i++ {
			v := ymax * float64(i) / 4
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%.1f" y="%.1f" text-anchor="end">%s</text>`,
				chartLeft, chartLeft+plotW, y(v), y(v), chartLeft-6, y(v)+4, svgchart.TickLabel(v))
		}
		legendX := chartLeft + 7*float64(len([]rune(p.Title+p.Unit))+3) + 20
		for _, s := range p.Series {
			// One polyline per run of readings: a gap (NaN) breaks the line.
			var pts []string
			flush := func() {
				if len(pts) > 0 {
					fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, s.Color, strings.Join(pts, " "))
				}
				pts = pts[:0]
			}
			for i, v := range s.Values {
				if math.IsNaN(v) {
					flush()
					continue
				}
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(bk[i].StartMs+float64(step.Milliseconds())/2), y(v)))
			}
			flush()
			// Legend entries follow the title (about 6.5 units per
			// character at this font size).
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="10" height="3" fill="%s"/><text x="%.1f" y="%.1f">%s</text>`,
				legendX, top-12, s.Color, legendX+14, top-8, template.HTMLEscapeString(s.Name))
			legendX += 14 + 6.5*float64(len([]rune(s.Name))) + 18
		}
	}
	// X axis under the last panel.
	bottom := chartTop + float64(len(panels))*(panelH+panelGap) - panelGap
	secs := span.Seconds()
	tick := svgchart.NiceCeil(secs / 10)
	for t := 0.0; t <= secs+1e-9; t += tick {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#999"/><text x="%.1f" y="%.1f" text-anchor="middle">%gs</text>`,
			x(t*1000), x(t*1000), bottom, bottom+4, x(t*1000), bottom+16, t)
	}
	// Markers across every panel.
	type marker struct {
		ms           float64
		color, label string
		dash         bool
	}
	var ms []marker
	for _, e := range sortedEvents(h) {
		c, l, ok := markerStyle(e.Kind)
		if !ok {
			continue
		}
		if e.Kind == EventSwitch {
			l = fmt.Sprintf("switch %s→%s", e.From, e.To)
		}
		ms = append(ms, marker{ms: float64(e.At.Sub(h.Start).Milliseconds()), color: c, label: l, dash: e.Kind == EventSwitch})
	}
	if rep != nil && rep.FaultAtMs != nil {
		if rep.RTOPublishMs != nil {
			ms = append(ms, marker{ms: *rep.FaultAtMs + *rep.RTOPublishMs, color: "#111", label: "first publish in " + h.To, dash: true})
		}
		if rep.RTODeliverMs != nil {
			ms = append(ms, marker{ms: *rep.FaultAtMs + *rep.RTODeliverMs, color: "#555", label: "first delivery in " + h.To, dash: true})
		}
	}
	slices.SortStableFunc(ms, func(a, b marker) int { return cmp.Compare(a.ms, b.ms) })
	var rowEnd []float64 // right end of the last label of each row
	for _, m := range ms {
		dash := ""
		if m.dash {
			dash = ` stroke-dasharray="4 3"`
		}
		mx := x(m.ms)
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="1.2"%s><title>%s at %.2fs</title></line>`,
			mx, mx, chartTop, bottom, m.color, dash, template.HTMLEscapeString(m.label), m.ms/1000)
		// Each label goes to the first row where it does not overlap the
		// previous one (about 6 units per character); near the right edge
		// it ends at its marker.
		w := 6.2 * float64(len([]rune(m.label)))
		lx, anchor := mx+3, "start"
		if lx+w > chartW {
			lx, anchor = mx-3, "end"
		}
		left := lx
		if anchor == "end" {
			left = lx - w
		}
		row := 0
		for row < len(rowEnd) && rowEnd[row] > left {
			row++
		}
		if row == maxLabelRows {
			row = maxLabelRows - 1 // crowded: overlap on the last row
		} else if row == len(rowEnd) {
			rowEnd = append(rowEnd, 0)
		}
		rowEnd[row] = left + w + 4
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="%s" text-anchor="%s">%s</text>`, lx, bottom+30+float64(row)*13, m.color, anchor, template.HTMLEscapeString(m.label))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

var htmlReport = template.Must(template.New("report").Funcs(template.FuncMap{"ms": fmtMs, "lat": fmtLat, "deref": func(v *float64) float64 { return *v }, "deref2": func(v *bool) bool { return *v }}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>meridian drill {{.R.Kind}} {{.R.Drill}}: {{.R.From}} → {{.R.To}}</title>
<style>
body{font-family:sans-serif;margin:24px;color:#222;max-width:1000px}
h1{font-size:20px} h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse} td,th{border:1px solid #ddd;padding:4px 10px;text-align:left}
th{background:#f5f5f5} .pass{color:#2ca02c;font-weight:bold} .fail{color:#d62728;font-weight:bold}
pre{background:#f8f8f8;padding:10px;overflow-x:auto}
</style></head><body>
<h1>meridian drill {{.R.Kind}} <code>{{.R.Drill}}</code>: {{.R.From}} → {{.R.To}}, fault {{.R.Fault}}</h1>
<p>{{if .R.Passed}}<span class="pass">PASS</span>: no acknowledged message lost.{{else}}<span class="fail">FAIL</span>: {{.R.Lost}} acknowledged messages lost.{{end}}
Client failover: {{.R.ClientFailover}}. Subscription: {{.R.Subscription}}.</p>
<h2>Timeline</h2>
{{.SVG}}
<p>Buckets of {{.Step}}. Vertical lines: the fault (red), client switches (blue, dashed), the heal (green),
the first publish and the first delivery in {{.R.To}} (black, dashed), the producers' stop (grey).
The lag panel counts messages from the drill's own history: acknowledged in {{.R.From}} and not yet seen
by the observer in {{.R.To}} (replication backlog), and acknowledged but not yet delivered to the consumers.</p>
<h2>Figures</h2>
<table>
<tr><th>figure</th><th>value</th><th>how it is measured</th></tr>
<tr><td>RTO publish</td><td>{{ms .R.RTOPublishMs}}</td><td>fault → first acknowledgement by {{.R.To}}</td></tr>
<tr><td>RTO delivery</td><td>{{ms .R.RTODeliverMs}}</td><td>fault → first delivery to a consumer connected to {{.R.To}}</td></tr>
<tr><td>RPO</td><td>{{.R.RPOMessages}} messages{{if .R.RPOWindowMs}}, oldest {{ms .R.RPOWindowMs}} before the fault{{end}}</td><td>acknowledged by {{.R.From}} before the fault, not seen in {{.R.To}} by the observer at the fault</td></tr>
<tr><td>RPO after heal</td><td>{{.R.RPORecovered}} of {{.R.RPOMessages}} arrived</td><td>of those, seen in {{.R.To}} by the end</td></tr>
<tr><td>duplicates</td><td>{{.R.Duplicates}} ({{.R.DuplicatesAfterFault}} after the fault)</td><td>deliveries beyond the first of each message</td></tr>
<tr><td>unreplicated acknowledgements</td><td>{{if .R.AckPendingAtFault}}{{printf "%.0f" (deref .R.AckPendingAtFault)}} (lag {{ms .R.AckLagAtFaultMs}}){{else}}n/a{{end}}</td><td>the replicated subscription's acknowledgements {{.R.To}} had not confirmed, last reading of {{.R.From}}'s broker before the fault; {{.R.DeliveredLast100ms}} messages were delivered in the last 100 ms before it</td></tr>
<tr><td>lost</td><td>{{.R.Lost}}</td><td>acknowledged, never delivered to a consumer</td></tr>
{{if .R.Targets.RTOWithin10s}}<tr><td>targets</td><td>RTO ≤ 10 s: {{if deref2 .R.Targets.RTOWithin10s}}met{{else}}<span class="fail">NOT met</span>{{end}}; duplicates ≤ deliveries of the last 100 ms: {{if deref2 .R.Targets.DuplicatesWithinLast100ms}}met{{else}}<span class="fail">NOT met</span>{{end}}</td><td>issue 9's targets (informational: only a loss fails the drill)</td></tr>{{end}}
<tr><td>sent / acknowledged / never acknowledged</td><td>{{.R.Sent}} / {{.R.Acked}} / {{.R.FailedSends}}</td><td>by {{.R.From}}: {{.R.AckedInFrom}}, by {{.R.To}}: {{.R.AckedInTo}}</td></tr>
</table>
<h2>Latency (p50 / p99)</h2>
<table>
<tr><th>phase</th><th>publish</th><th>end to end</th></tr>
<tr><td>before the fault</td><td>{{lat .R.PublishLatency.Before}}</td><td>{{lat .R.EndToEnd.Before}}</td></tr>
<tr><td>during (sent before the first publish in {{.R.To}})</td><td>{{lat .R.PublishLatency.During}}</td><td>{{lat .R.EndToEnd.During}}</td></tr>
<tr><td>after</td><td>{{lat .R.PublishLatency.After}}</td><td>{{lat .R.EndToEnd.After}}</td></tr>
</table>
<h2>Summary</h2>
<pre>{{.Text}}</pre>
<details><summary>JSON</summary><pre>{{.JSON}}</pre></details>
</body></html>
`))

// WriteHTML writes the self-contained HTML report of rep, drawn from h.
func (r *Report) WriteHTML(w io.Writer, h History) error {
	var text, js bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		return err
	}
	if err := r.WriteJSON(&js); err != nil {
		return err
	}
	return htmlReport.Execute(w, map[string]any{
		"R":    r,
		"SVG":  template.HTML(svgTimeline(h, r)), //nolint:gosec // built from numbers and escaped labels
		"Step": timelineStep(h.End.Sub(h.Start)).String(),
		"Text": text.String(),
		"JSON": js.String(),
	})
}
