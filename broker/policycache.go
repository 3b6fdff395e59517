package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/meridianmq/meridian/metadata"
	"github.com/prometheus/client_golang/prometheus"
)

// topicPolicyPrefix + "tenant/namespace/topic" holds a topic's overrides
// (replication regions and policy fields: topicPolicyRecord, JSON) in the
// global shard.
const topicPolicyPrefix = "topic-policies/"

// cachedPrefixes are the global-shard prefixes the policy cache mirrors.
var cachedPrefixes = []string{tenantPrefix, namespacePrefix, topicPolicyPrefix, prefixPolicyPrefix, regionPrefix, failoverPrefix, partitionedPrefix,
	schemaPrefix, schemaCompatPrefix}

// Bounds of the policy cache's background work.
const (
	// policyListTimeout bounds one full List of a prefix.
	policyListTimeout = 10 * time.Second
	// policyRetryMax caps the pause between attempts to list or watch a
	// prefix again after a failure: after a heal, changes made meanwhile
	// apply within about this long.
	policyRetryMax = 2 * time.Second
	// policyFreshTimeout bounds the linearizable read of an admin "get":
	// past it, the answer is the last seen copy, marked stale.
	policyFreshTimeout = 3 * time.Second
)

// policyCache mirrors the policy keys of the global shard (tenants,
// namespaces, topic overrides, prefix policies, regions, failover groups,
// partitioned topics, and the schema registry's versions and
// compatibility modes) in the broker's memory, so that a region cut off
// from the global quorum keeps serving with the policies and schemas it
// last saw.
//
// Each prefix is listed once, then watched from the list's revision; the
// watch resumes after the last revision it applied when it breaks (a
// partition, a metadata node restart), so changes made while the region
// was cut off apply as soon as it reaches the global shard again. A
// compacted history makes it list again.
//
// Reads hit the mirror first. A key the mirror does not hold is read from
// the store (linearizable, then stale) and added, since a key created a
// moment ago elsewhere may not have been delivered by the watch yet; for
// topic overrides, whose absence is the common case, a listed prefix is
// trusted instead (see get). The mirror costs one copy of every key under
// the prefixes: small (one per tenant, namespace, region, topic override
// and partitioned topic, plus the schema versions, capped at
// MaxSchemaVersions per topic).
//
// All methods are safe for concurrent use.
type policyCache struct {
	store    metadata.Store
	log      *slog.Logger
	onChange func(key string)
	stale    prometheus.Counter

	// mu guards the fields below.
	mu   sync.Mutex
	keys map[string]metadata.KV
	// listed[prefix] is true once the prefix was listed completely.
	listed map[string]bool
	// rev[prefix] is the revision through which every change of the prefix
	// has been applied to keys.
	rev map[string]int64
}

func newPolicyCache(store metadata.Store, log *slog.Logger, reg prometheus.Registerer, onChange func(string)) (*policyCache, error) {
	c := &policyCache{store: store, log: log, onChange: onChange,
		stale: prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_broker_policy_stale_reads_total",
			Help: "Policy reads answered from the broker's last seen copy because the global metadata shard could not be read."}),
		keys: map[string]metadata.KV{}, listed: map[string]bool{}, rev: map[string]int64{}}
	if reg != nil {
		if err := reg.Register(c.stale); err != nil {
			return nil, fmt.Errorf("broker: register policy cache metrics: %w", err)
		}
	}
	return c, nil
}

func cachePrefix(key string) string {
	for _, p := range cachedPrefixes {
		if strings.HasPrefix(key, p) {
			return p
		}
	}
	return ""
}

// run keeps the mirror current until ctx ends: one goroutine per prefix.
func (c *policyCache) run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, p := range cachedPrefixes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.follow(ctx, p)
		}()
	}
	wg.Wait()
}

// follow lists then watches one prefix, resuming after failures.
func (c *policyCache) follow(ctx context.Context, prefix string) {
	bo := newPolicyBackoff()
	needList := true
	for ctx.Err() == nil {
		if needList {
			if err := c.list(ctx, prefix); err != nil {
				c.log.Debug("policy cache: list failed; retrying", "prefix", prefix, "err", err)
				bo.wait(ctx)
				continue
			}
			needList = false
		}
		c.mu.Lock()
		from := c.rev[prefix]
		c.mu.Unlock()
		evs, errc := c.store.Watch(ctx, prefix, from)
		for ev := range evs {
			c.apply(prefix, ev)
			bo.reset()
		}
		err := <-errc
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, metadata.ErrCompacted) {
			needList = true
		}
		c.log.Info("policy cache: watch of the global shard ended; serving the last seen policies until it resumes", "prefix", prefix, "err", err)
		bo.wait(ctx)
	}
}

// list replaces the prefix's keys with a full listing and sets its revision.
func (c *policyCache) list(ctx context.Context, prefix string) error {
	lctx, cancel := context.WithTimeout(ctx, policyListTimeout)
	defer cancel()
	var all []metadata.KV
	var rev int64 = -1
	page := metadata.Page{}
	for {
		res, err := c.store.List(lctx, prefix, page, metadata.ReadOptions{})
		if err != nil {
			return err
		}
		if rev < 0 {
			// Pages read later may include changes after this revision;
			// the watch from here replays them, harmlessly.
			rev = res.Revision
		}
		all = append(all, res.KVs...)
		if !res.More || len(res.KVs) == 0 {
			break
		}
		page.After = res.KVs[len(res.KVs)-1].Key
	}
	var changed []string
	c.mu.Lock()
	seen := make(map[string]bool, len(all))
	for _, kv := range all {
		seen[kv.Key] = true
		if cur, ok := c.keys[kv.Key]; !ok || cur.ModRevision != kv.ModRevision {
			changed = append(changed, kv.Key)
		}
		c.keys[kv.Key] = kv
	}
	for k := range c.keys {
		if strings.HasPrefix(k, prefix) && !seen[k] {
			delete(c.keys, k)
			changed = append(changed, k)
		}
	}
	c.listed[prefix] = true
	c.rev[prefix] = rev
	c.mu.Unlock()
	c.notify(changed...)
	return nil
}

// apply applies one watch event.
func (c *policyCache) apply(prefix string, ev metadata.Event) {
	c.mu.Lock()
	cur, ok := c.keys[ev.KV.Key]
	changed := false
	switch ev.Type {
	case metadata.EventPut:
		if !ok || cur.ModRevision < ev.KV.ModRevision {
			c.keys[ev.KV.Key] = ev.KV
			changed = true
		}
	case metadata.EventDelete:
		if ok && cur.ModRevision < ev.Revision {
			delete(c.keys, ev.KV.Key)
			changed = true
		}
	}
	if ev.Revision > c.rev[prefix] {
		c.rev[prefix] = ev.Revision
	}
	c.mu.Unlock()
	if changed {
		c.notify(ev.KV.Key)
	}
}

func (c *policyCache) notify(keys ...string) {
	if c.onChange == nil {
		return
	}
	for _, k := range keys {
		c.onChange(k)
	}
}

// learn adds a value read from, or written to, the store unless the mirror
// already knows a later state of the key (a later write, or its delete).
func (c *policyCache) learn(kv metadata.KV) {
	p := cachePrefix(kv.Key)
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.keys[kv.Key]; ok {
		if cur.ModRevision < kv.ModRevision {
			c.keys[kv.Key] = kv
		}
		return
	}
	// Absent although the watch applied every change through rev[p] and
	// the value is older: the key was deleted since.
	if c.listed[p] && kv.ModRevision <= c.rev[p] {
		return
	}
	c.keys[kv.Key] = kv
}

// forget drops a key this broker has just deleted (the watch confirms).
func (c *policyCache) forget(key string) {
	c.mu.Lock()
	delete(c.keys, key)
	c.mu.Unlock()
}

// cached returns the mirror's copy of key and whether its prefix was
// listed (then a missing key did not exist at the last revision seen).
func (c *policyCache) cached(key string) (kv metadata.KV, ok, listed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	kv, ok = c.keys[key]
	return kv, ok, c.listed[cachePrefix(key)]
}

// get reads key through the mirror. A hit answers at once, whatever the
// state of the global shard. On a miss it reads the store (linearizable,
// then from the local replica); trustMiss answers ErrNotFound without a
// store read when the prefix was listed (topic overrides: their absence
// must not cost a global round trip, nor block during a partition). The
// returned KV's Value must not be modified.
func (c *policyCache) get(ctx context.Context, key string, trustMiss bool) (metadata.KV, error) {
	kv, ok, listed := c.cached(key)
	if ok {
		return kv, nil
	}
	if trustMiss && listed {
		return metadata.KV{}, metadata.ErrNotFound
	}
	return c.read(ctx, key)
}

// children lists the keys under prefix through the mirror: once the
// prefix's cache prefix was listed, the mirror answers, whatever the state
// of the global shard (like get with trustMiss: a key created a moment ago
// elsewhere may be missing until the watch delivers it). Before that, it
// lists the store (linearizable, then from the local replica) and adds
// what it read. The returned KVs' Values must not be modified.
func (c *policyCache) children(ctx context.Context, prefix string) ([]metadata.KV, error) {
	c.mu.Lock()
	if c.listed[cachePrefix(prefix)] {
		var kvs []metadata.KV
		for k, kv := range c.keys {
			if strings.HasPrefix(k, prefix) {
				kvs = append(kvs, kv)
			}
		}
		c.mu.Unlock()
		return kvs, nil
	}
	c.mu.Unlock()
	kvs, err := c.listStore(ctx, prefix, false)
	if err != nil && ctx.Err() == nil {
		kvs, err = c.listStore(ctx, prefix, true)
	}
	if err != nil {
		return nil, err
	}
	for _, kv := range kvs {
		c.learn(kv)
	}
	return kvs, nil
}

// listStore lists every key under prefix from the store.
func (c *policyCache) listStore(ctx context.Context, prefix string, stale bool) ([]metadata.KV, error) {
	var kvs []metadata.KV
	page := metadata.Page{}
	for {
		res, err := c.store.List(ctx, prefix, page, metadata.ReadOptions{Stale: stale})
		if err != nil {
			return nil, err
		}
		kvs = append(kvs, res.KVs...)
		if !res.More || len(res.KVs) == 0 {
			return kvs, nil
		}
		page.After = res.KVs[len(res.KVs)-1].Key
	}
}

// read reads key from the store, falling back to the local replica.
func (c *policyCache) read(ctx context.Context, key string) (metadata.KV, error) {
	kv, err := c.store.Get(ctx, key, metadata.ReadOptions{})
	if err != nil && !errors.Is(err, metadata.ErrNotFound) && ctx.Err() == nil {
		kv, err = c.store.Get(ctx, key, metadata.ReadOptions{Stale: true})
	}
	if err != nil {
		return metadata.KV{}, err
	}
	c.learn(kv)
	return kv, nil
}

// fresh reads key linearizably (bounded by policyFreshTimeout) for admin
// answers; when the store cannot answer it returns the mirror's copy with
// stale = true, or the store's error when the mirror has none.
func (c *policyCache) fresh(ctx context.Context, key string) (kv metadata.KV, stale bool, err error) {
	fctx, cancel := context.WithTimeout(ctx, policyFreshTimeout)
	kv, err = c.store.Get(fctx, key, metadata.ReadOptions{})
	cancel()
	switch {
	case err == nil:
		c.learn(kv)
		return kv, false, nil
	case errors.Is(err, metadata.ErrNotFound):
		return metadata.KV{}, false, err
	}
	if ckv, ok, listed := c.cached(key); ok {
		c.stale.Inc()
		return ckv, true, nil
	} else if listed {
		c.stale.Inc()
		return metadata.KV{}, true, metadata.ErrNotFound
	}
	return metadata.KV{}, false, err
}

// listFresh lists the direct children of prefix linearizably, falling
// back to the mirror (stale = true) when the store cannot answer.
func (c *policyCache) listFresh(ctx context.Context, prefix string) (kvs []metadata.KV, stale bool, err error) {
	fctx, cancel := context.WithTimeout(ctx, policyFreshTimeout)
	defer cancel()
	page := metadata.Page{}
	for {
		res, lerr := c.store.List(fctx, prefix, page, metadata.ReadOptions{})
		if lerr != nil {
			err = lerr
			break
		}
		kvs = append(kvs, res.KVs...)
		if !res.More || len(res.KVs) == 0 {
			return kvs, false, nil
		}
		page.After = res.KVs[len(res.KVs)-1].Key
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.listed[cachePrefix(prefix)] {
		return nil, false, err
	}
	kvs = kvs[:0]
	for k, kv := range c.keys {
		if strings.HasPrefix(k, prefix) {
			kvs = append(kvs, kv)
		}
	}
	c.stale.Inc()
	return kvs, true, nil
}

// policyBackoff doubles from 100 ms to policyRetryMax.
type policyBackoff struct{ d time.Duration }

func newPolicyBackoff() *policyBackoff { return &policyBackoff{d: 100 * time.Millisecond} }

func (b *policyBackoff) reset() { b.d = 100 * time.Millisecond }

func (b *policyBackoff) wait(ctx context.Context) {
	t := time.NewTimer(b.d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	b.d = min(2*b.d, policyRetryMax)
}
