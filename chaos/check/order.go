package check

import (
	"fmt"
	"slices"
	"strings"
)

// checkOrder checks per-producer order where Meridian promises it.
//
// A producer's messages stored by one region are stored in that region's
// log in sequence order and replicated in that order, so the unit of
// order is (producer, storage origin): with client failover a producer's
// messages stored by different regions reach a third log in replication
// order, which is not a violation. The storage origin is the record's
// StoredOrigin when the runner recorded it (then every sent message is
// checked), else the acknowledging region (then only acknowledged
// messages are checked: an indefinite send has no known place).
//
// Within a unit, the first occurrence of seq s after the first occurrence
// of a higher seq is a violation; a second occurrence (a redelivery after
// a rewind, a resend stored twice) is a duplicate, not a violation. Checked:
// each region's read-back; the deliveries of exclusive and failover
// subscriptions (per subscription and region; a replicated subscription's
// deliveries in every region merged in time order); key_shared per key.
// Shared subscriptions promise no order and are not checked.
func checkOrder(x *hindex, _ Options) Result {
	var ex examples
	violations := 0
	perWhere := map[string]int{}
	type unit struct {
		where, producer, ackRegion, key string
	}
	scan := func(where string, recs []Record, byKey bool) {
		maxSeen := map[unit]int64{}
		first := map[msgKey]bool{}
		for _, r := range recs {
			k := keyOf(r)
			s := x.sends[k]
			if s == nil || first[k] {
				continue
			}
			// The storage origin: named by the record, else the
			// acknowledging region (only acknowledged messages have one).
			origin := r.StoredOrigin
			if origin == "" {
				if s.outcome != KindAck {
					continue
				}
				origin = s.ackRegion
			}
			first[k] = true
			u := unit{where: where, producer: k.Origin + "/" + k.Producer, ackRegion: origin}
			if byKey {
				u.key = r.Key
			}
			if m, ok := maxSeen[u]; ok && k.Seq < m {
				violations++
				perWhere[where]++
				keyNote := ""
				if byKey {
					keyNote = fmt.Sprintf(" key %q", r.Key)
				}
				ex.add("%s: %s%s (stored first in %s) first seen after #%d", where, k, keyNote, origin, m)
				continue
			}
			maxSeen[u] = max(maxSeen[u], k.Seq)
		}
	}
	for _, r := range x.regions {
		scan("read-back "+r, x.reads[r], false)
	}
	// A replicated subscription is one subscription in every region: its
	// consumers move between regions with its cursor, so its deliveries in
	// all regions are merged in time order (a message first delivered in a
	// and delivered again in b after a move is a redelivery there).
	checked := 0
	merged := map[[2]string][]Record{}
	var mergedOrder [][2]string
	byKey := map[[2]string]bool{}
	for _, sk := range x.subOrder {
		typ := x.subType(sk)
		if typ != "exclusive" && typ != "failover" && typ != "key_shared" {
			continue
		}
		if x.subRepl[sk] || x.runSubReplicated(sk) {
			k := [2]string{sk.Topic, sk.Sub}
			if _, ok := merged[k]; !ok {
				mergedOrder = append(mergedOrder, k)
			}
			merged[k] = append(merged[k], x.deliveries[sk]...)
			byKey[k] = typ == "key_shared"
			continue
		}
		scan("sub "+sk.String(), x.deliveries[sk], typ == "key_shared")
		checked++
	}
	for _, k := range mergedOrder {
		recs := merged[k]
		slices.SortStableFunc(recs, func(a, b Record) int { return a.T.Compare(b.T) })
		where := "replicated sub " + k[0] + "/" + k[1]
		scan(where, recs, byKey[k])
		checked++
	}
	var parts []string
	for _, r := range x.regions {
		if n := perWhere["read-back "+r]; n > 0 {
			parts = append(parts, fmt.Sprintf("read-back %s: %d", r, n))
		}
	}
	for _, sk := range x.subOrder {
		if n := perWhere["sub "+sk.String()]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s: %d", sk, n))
		}
	}
	for _, k := range mergedOrder {
		if n := perWhere["replicated sub "+k[0]+"/"+k[1]]; n > 0 {
			parts = append(parts, fmt.Sprintf("replicated %s/%s: %d", k[0], k[1], n))
		}
	}
	detail := fmt.Sprintf("%d out-of-order first occurrences in %d read-backs and %d ordered subscriptions", violations, len(x.regions), checked)
	if len(parts) > 0 {
		detail += " (" + strings.Join(parts, ", ") + ")"
	}
	return Result{Pass: violations == 0, Count: violations, Detail: detail, Examples: ex}
}

// runSubReplicated reports whether the run describes sk's subscription
// (by topic and name, in any region) as replicated.
func (x *hindex) runSubReplicated(sk subKey) bool {
	if x.run == nil {
		return false
	}
	for _, s := range x.run.Subscriptions {
		if s.Topic == sk.Topic && s.Name == sk.Sub && s.Replicated {
			return true
		}
	}
	return false
}

// subType is the type of a subscription: named by its deliveries, else by
// the run's description of it.
func (x *hindex) subType(sk subKey) string {
	if t := x.subTypes[sk]; t != "" {
		return t
	}
	if x.run != nil {
		for _, s := range x.run.Subscriptions {
			if s.Region == sk.Region && s.Topic == sk.Topic && s.Name == sk.Sub {
				return s.Type
			}
		}
	}
	return ""
}
