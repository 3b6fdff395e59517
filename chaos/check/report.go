package check

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes the verdict as exactly one JSON line.
func (v Verdict) WriteJSON(w io.Writer) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// verdictWord is PASS or FAIL.
func verdictWord(pass bool) string {
	if pass {
		return "PASS"
	}
	return "FAIL"
}

// WriteText writes the verdict table (one row per checker: name, verdict,
// count, detail), the key counts, and the examples of failed checkers.
func (v Verdict) WriteText(w io.Writer) error {
	var b strings.Builder
	if r := v.Run; r != nil {
		fmt.Fprintf(&b, "meridian chaos run %s: seed %d, regions %s", r.ID, r.Seed, strings.Join(r.Regions, ","))
		if r.Scenario != "" {
			fmt.Fprintf(&b, ", scenario %s", r.Scenario)
		}
		if len(r.Faults) > 0 {
			fmt.Fprintf(&b, ", faults %s", strings.Join(r.Faults, ","))
		}
		fmt.Fprintln(&b)
	}
	s := v.Stats
	fmt.Fprintf(&b, "  sent %d: acknowledged %d (%s), failed %d, timed out %d, unanswered %d (indefinite and stored: %d)\n",
		s.Sent, s.Acked, mapString(s.AckedPerRegion), s.Failed, s.Timeouts, s.Unanswered, s.IndefiniteStored)
	fmt.Fprintf(&b, "  delivered %d messages in %d deliveries (%d duplicates); read back %s; extra stored copies %d\n",
		s.Delivered, s.Deliveries, s.Duplicates, mapString(s.ReadPerRegion), s.StoredTwice)
	fmt.Fprintf(&b, "  faults %d (%d failed to inject or heal), history spans %.1f s\n", s.Faults, s.FaultErrors, float64(s.DurationMs)/1000)
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  CHECKER\tVERDICT\tCOUNT\tDETAIL")
	for _, r := range v.Results {
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\n", r.Name, verdictWord(r.Pass), r.Count, r.Detail)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range v.Results {
		if r.Pass || len(r.Examples) == 0 {
			continue
		}
		fmt.Fprintf(&b, "  %s examples:\n", r.Name)
		for _, e := range r.Examples {
			fmt.Fprintf(&b, "    %s\n", e)
		}
	}
	if v.Valid {
		fmt.Fprintln(&b, "  result  VALID: every checker passed")
	} else {
		var failed []string
		for _, r := range v.Results {
			if !r.Pass {
				failed = append(failed, r.Name)
			}
		}
		fmt.Fprintf(&b, "  result  INVALID: %s failed\n", strings.Join(failed, ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// mapString formats counts per key in key order ("a: 3, b: 4").
func mapString(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		name := k
		if name == "" {
			name = "?"
		}
		parts = append(parts, fmt.Sprintf("%s: %d", name, m[k]))
	}
	return strings.Join(parts, ", ")
}
