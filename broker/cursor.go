package broker

import (
	"encoding/json"
	"fmt"
	"sort"
)

// cursorRecord is a subscription's stored cursor: the mark-delete position
// (every entry up to it is acknowledged) plus the entries after it that are
// acknowledged individually, as [ledger, firstEntry, lastEntry] ranges.
type cursorRecord struct {
	MarkDelete [2]int64   `json:"md"`
	Acked      [][3]int64 `json:"acked,omitempty"`
	CreatedMs  int64      `json:"created_ms"`
}

func encodeCursor(md pos, acked map[pos]struct{}, createdMs int64, maxAcks int) []byte {
	rec := cursorRecord{MarkDelete: [2]int64{md.L, md.E}, CreatedMs: createdMs}
	rec.Acked = ackRanges(acked, maxAcks)
	b, _ := json.Marshal(&rec)
	return b
}

// ackRanges collapses acknowledged positions into per-ledger ranges. Only
// the first maxAcks positions (in ledger/entry order) are kept: the rest
// would be redelivered after a restart, never lost.
func ackRanges(acked map[pos]struct{}, maxAcks int) [][3]int64 {
	ps := make([]pos, 0, len(acked))
	for p := range acked {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].L < ps[j].L || ps[i].L == ps[j].L && ps[i].E < ps[j].E })
	if len(ps) > maxAcks {
		ps = ps[:maxAcks]
	}
	var out [][3]int64
	for _, p := range ps {
		if n := len(out); n > 0 && out[n-1][0] == p.L && out[n-1][2]+1 == p.E {
			out[n-1][2] = p.E
			continue
		}
		out = append(out, [3]int64{p.L, p.E, p.E})
	}
	return out
}

func decodeCursor(b []byte) (pos, map[pos]struct{}, int64, error) {
	var rec cursorRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return pos{}, nil, 0, fmt.Errorf("broker: cursor record corrupt: %v", err)
	}
	acked := map[pos]struct{}{}
	for _, r := range rec.Acked {
		for e := r[1]; e <= r[2] && e-r[1] < 1<<20; e++ {
			acked[pos{r[0], e}] = struct{}{}
		}
	}
	return pos{rec.MarkDelete[0], rec.MarkDelete[1]}, acked, rec.CreatedMs, nil
}

// formatRanges renders ranges as "[L:E..L:E]" for internal stats.
func formatRanges(r [][3]int64) []string {
	out := make([]string, 0, len(r))
	for _, x := range r {
		out = append(out, fmt.Sprintf("[%d:%d..%d:%d]", x[0], x[1], x[0], x[2]))
	}
	return out
}
