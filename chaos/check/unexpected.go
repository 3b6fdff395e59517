package check

import (
	"fmt"
	"slices"
)

// checkUnexpected: a message delivered or read back that was never sent
// (no send record for its origin, producer and sequence); a payload that
// is not one of the run's (Unparsed) on one of the run's topics; a message
// stored although its send failed with a definite error; a completion
// (ack, fail, timeout) of a message never sent.
func checkUnexpected(x *hindex, _ Options) Result {
	var ex examples
	neverSent, unparsed, failedStored, orphans := 0, 0, 0, 0
	seen := map[msgKey]bool{}
	check := func(r Record) {
		k := keyOf(r)
		if _, ok := x.sends[k]; ok || seen[k] {
			return
		}
		seen[k] = true
		neverSent++
		ex.add("%s %s in %s (%s%s) was never sent", k, r.Kind, r.Region, r.Topic, subSuffix(r))
	}
	for _, sk := range x.subOrder {
		for _, d := range x.deliveries[sk] {
			check(d)
		}
	}
	for _, r := range x.regions {
		for _, rd := range x.reads[r] {
			check(rd)
		}
	}
	for _, u := range x.unparsed {
		if x.run != nil && len(x.run.Topics) > 0 && u.Topic != "" && !slices.Contains(x.run.Topics, u.Topic) {
			continue
		}
		unparsed++
		ex.add("unparsed payload %s in %s (%s%s): %q", u.Kind, u.Region, u.Topic, subSuffix(u), u.Payload)
	}
	for _, k := range x.sendOrder {
		if x.sends[k].outcome == KindFail && x.stored(k) {
			failedStored++
			ex.add("%s failed definitely but was stored", k)
		}
	}
	for _, c := range x.orphanCompletions {
		orphans++
		ex.add("%s %s in %s, never sent", keyOf(c), c.Kind, c.Region)
	}
	n := neverSent + unparsed + failedStored + orphans
	return Result{
		Pass:  n == 0,
		Count: n,
		Detail: fmt.Sprintf("never sent: %d, unparsed payloads: %d, failed sends stored: %d, completions of unsent messages: %d",
			neverSent, unparsed, failedStored, orphans),
		Examples: ex,
	}
}

func subSuffix(r Record) string {
	if r.Sub == "" {
		return ""
	}
	return ", sub " + r.Sub
}
