package wire

import (
	"fmt"
	"strconv"
	"strings"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// FormatMessageID renders id as "ledger:entry:batch".
func FormatMessageID(id *clientv1.MessageId) string {
	return fmt.Sprintf("%d:%d:%d", id.GetLedgerId(), id.GetEntryId(), id.GetBatchIndex())
}

// ParseMessageID parses "ledger:entry:batch" (or "ledger:entry", batch 0).
func ParseMessageID(s string) (*clientv1.MessageId, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 2 && len(parts) != 3 {
		return nil, fmt.Errorf("%w: message ID %q: want ledger:entry:batch", ErrCorrupt, s)
	}
	l, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil || l < 0 {
		return nil, fmt.Errorf("%w: message ID %q: ledger %q is not a non-negative integer", ErrCorrupt, s, parts[0])
	}
	e, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || e < 0 {
		return nil, fmt.Errorf("%w: message ID %q: entry %q is not a non-negative integer", ErrCorrupt, s, parts[1])
	}
	var b int64
	if len(parts) == 3 {
		b, err = strconv.ParseInt(parts[2], 10, 32)
		if err != nil || b < 0 {
			return nil, fmt.Errorf("%w: message ID %q: batch index %q is not a non-negative int32", ErrCorrupt, s, parts[2])
		}
	}
	return &clientv1.MessageId{LedgerId: l, EntryId: e, BatchIndex: int32(b)}, nil
}
