package broker

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/meridianmq/meridian/metadata"
)

// Origin streams and incarnations.
//
// A region numbers its own entries of a topic 1, 2, 3, ... (origin_seq,
// replication_seq.go). The counter lives in the topic's ledger list, so it
// starts again at 1 when the list is created again: the topic deleted and
// written again, the region rebuilt under the same name, its regional
// metadata wiped. Receivers would answer every new entry DUPLICATE of the
// old one with the same number, and the new entries would replicate
// nowhere. So each counter gets an incarnation, allocated in the GLOBAL
// metadata shard when the counter is created (the one place that survives
// a region's loss): the key originIncarnationKey(region) holds the last
// incarnation given to any topic of that region, and each new ledger list
// takes the next one by compare-and-set. An entry's identity across
// regions is (origin region, origin incarnation, origin_seq), and every
// per-origin state (dedup marks meridian.repl.<stream>, applied maps, ack
// vectors, barriers) is keyed by the origin stream key below; what
// compares an origin with a region name (our own entries coming back, the
// remote's own entries, direct lists) uses its region part.
//
// Incarnation 0 is the legacy stream of lists written before incarnations
// existed: such a list keeps numbering under 0, its stream key is the bare
// region name, as before.
//
// When the global shard does not answer within incarnationAllocWait while
// a counter is created (the region cut off from it), the topic still loads
// (a region keeps serving, and creating topics, without the global shard:
// policycache.go) with a provisional incarnation, provisionalIncarnation:
// the creation time in Unix ms with bit 62 set, so it never equals a
// number of the global counter, and two lists of one topic created in one
// region at different milliseconds never share it. It is unique as long as
// the region's clock does not step back onto the exact millisecond of an
// earlier list of the same topic; the global counter is the normal path.
// Loading a topic whose list already exists never needs the global shard.

// incarnationAllocWait bounds the wait for the global shard when a counter
// is created, before a provisional incarnation is taken instead.
const incarnationAllocWait = 3 * time.Second

// provisionalBit marks provisional incarnations (provisionalIncarnation).
const provisionalBit = uint64(1) << 62

// provisionalIncarnation is the incarnation of a counter created while the
// global shard does not answer: the creation time with provisionalBit set.
func provisionalIncarnation(now time.Time) uint64 {
	return provisionalBit | uint64(max(now.UnixMilli(), 1))
}

// newIncarnation allocates the origin incarnation of a new counter: from
// the global counter, or a provisional one when the global shard does not
// answer within incarnationAllocWait (logged).
func (ml *managedLedger) newIncarnation(ctx context.Context) (uint64, error) {
	ictx, cancel := context.WithTimeout(ctx, min(incarnationAllocWait, ml.cfg.OperationTimeout))
	defer cancel()
	inc, err := allocIncarnation(ictx, ml.cfg.Global, ml.cfg.Region)
	if err == nil {
		return inc, nil
	}
	if ctx.Err() != nil {
		return 0, fmt.Errorf("%w: create topic %s: %v", ErrUnavailable, ml.topic, ctx.Err())
	}
	if !errors.Is(err, ErrUnavailable) {
		return 0, err
	}
	inc = provisionalIncarnation(time.Now())
	ml.log.Warn("global metadata shard unreachable: topic created with a provisional origin incarnation",
		"incarnation", inc, "err", err)
	return inc, nil
}

// originIncarnationPrefix + region is the global key of a region's last
// allocated origin incarnation (decimal).
const originIncarnationPrefix = "origin-incarnations/"

func originIncarnationKey(region string) string { return originIncarnationPrefix + region }

// originStreamKey names one origin's stream of entries: the region for
// incarnation 0 (entries written before incarnations), region@inc after.
func originStreamKey(region string, inc uint64) string {
	if inc == 0 {
		return region
	}
	return region + "@" + strconv.FormatUint(inc, 10)
}

// splitOriginStream is the inverse of originStreamKey.
func splitOriginStream(key string) (region string, inc uint64) {
	r, s, ok := strings.Cut(key, "@")
	if !ok {
		return key, 0
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return key, 0
	}
	return r, n
}

// allocIncarnation returns a new origin incarnation of region, never given
// before: the global counter key raised by one with a compare-and-set
// (retried on a conflict). An unknown outcome is retried too: at worst a
// number is skipped, never given twice. It fails with ErrUnavailable when
// the global shard does not answer within ctx.
func allocIncarnation(ctx context.Context, global metadata.Store, region string) (uint64, error) {
	key := originIncarnationKey(region)
	backoff := 5 * time.Millisecond
	for {
		var cur uint64
		version := metadata.MustNotExist
		kv, err := global.Get(ctx, key, metadata.ReadOptions{})
		switch {
		case errors.Is(err, metadata.ErrNotFound):
		case err != nil:
			return 0, fmt.Errorf("%w: allocate the origin incarnation of region %s (global metadata shard, key %s): %v; retry",
				ErrUnavailable, region, key, err)
		default:
			n, perr := strconv.ParseUint(strings.TrimSpace(string(kv.Value)), 10, 64)
			if perr != nil {
				return 0, fmt.Errorf("broker: global key %s is corrupt (%q): %v", key, kv.Value, perr)
			}
			cur, version = n, kv.Version
		}
		next := cur + 1
		_, err = global.Put(ctx, key, []byte(strconv.FormatUint(next, 10)), version, 0)
		if err == nil {
			return next, nil
		}
		if !errors.Is(err, metadata.ErrVersionMismatch) && !errors.Is(err, metadata.ErrUnknownOutcome) {
			return 0, fmt.Errorf("%w: allocate the origin incarnation of region %s (global metadata shard, key %s): %v; retry",
				ErrUnavailable, region, key, err)
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%w: allocate the origin incarnation of region %s: %v; retry", ErrUnavailable, region, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// pruneIncarnations bounds the dedup marks kept per origin region:
// the marks of old incarnations stay pinned (a relay may still ship an old
// stream's entries), but beyond max streams of one region the lowest
// incarnations are forgotten (a resend of those could then be stored
// again: a duplicate, never a loss). The legacy stream (incarnation 0)
// counts as the lowest. The bound is d.maxStreams (0: none).
func (d *dedupTable) pruneIncarnations(region string) {
	maxStreams := d.maxStreams
	if maxStreams < 1 {
		return
	}
	type st struct {
		name string
		inc  uint64
	}
	var all []st
	for name := range d.byName {
		if !isReplName(name) {
			continue
		}
		r, inc := splitOriginStream(name[len(ReplDedupPrefix):])
		if r == region {
			all = append(all, st{name, inc})
		}
	}
	if len(all) <= maxStreams {
		return
	}
	sort.Slice(all, func(i, j int) bool { return all[i].inc < all[j].inc })
	for _, s := range all[:len(all)-maxStreams] {
		if p := d.byName[s.name]; p != nil && p.elem != nil {
			d.lru.Remove(p.elem)
		}
		delete(d.byName, s.name)
	}
}

// replRegions returns the origin regions with a dedup mark.
func (d *dedupTable) replRegions() []string {
	seen := map[string]bool{}
	var out []string
	for name := range d.byName {
		if !isReplName(name) {
			continue
		}
		r, _ := splitOriginStream(name[len(ReplDedupPrefix):])
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	sort.Strings(out)
	return out
}

// ownIncarnation returns the origin incarnation of this region's entries
// of the topic.
func (ml *managedLedger) ownIncarnation() uint64 {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return ml.incarnation
}

// validateOriginStream checks an origin stream key received from another
// region (a vector's key): a valid region name, optionally followed by
// "@" and an incarnation >= 1 in canonical decimal.
func validateOriginStream(field, key string) error {
	region, rest, hasInc := strings.Cut(key, "@")
	if err := ValidateName(field, region); err != nil {
		return err
	}
	if !hasInc {
		return nil
	}
	if _, inc := splitOriginStream(key); inc == 0 || originStreamKey(region, inc) != key {
		return fmt.Errorf("%w: %s %q: the incarnation after '@' must be a decimal number >= 1 without leading zeros, got %q",
			ErrInvalidArgument, field, key, rest)
	}
	return nil
}
