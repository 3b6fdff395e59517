package metadata

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/lni/dragonboat/v4"
	sm "github.com/lni/dragonboat/v4/statemachine"
)

// shardStore is the in-process Store of one shard on one NodeHost. Writes
// are proposals (forwarded by Dragonboat to the leader), reads are ReadIndex
// reads or local stale reads.
type shardStore struct {
	node    *Node
	name    string
	shardID uint64
	notify  *notifier
}

var _ Store = (*shardStore)(nil)

// withDeadline gives ctx the node's request timeout when it has no
// deadline: Dragonboat needs one.
func (s *shardStore) withDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, s.node.cfg.RequestTimeout)
}

// retryable reports Dragonboat errors that guarantee the request was not
// proposed, so it may be sent again.
func retryable(err error) bool {
	return errors.Is(err, dragonboat.ErrShardNotReady) || errors.Is(err, dragonboat.ErrSystemBusy)
}

// wait sleeps for a backoff step or until ctx ends.
func wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// propose sends a command until it is proposed, then maps Dragonboat's
// errors: a proposal that may have been committed is ErrUnknownOutcome.
// safe commands (version-guarded, or idempotent) are sent again after an
// attempt with an unknown outcome; if the retry then fails its guard the
// result is ErrUnknownOutcome, since the first attempt may have applied.
func (s *shardStore) propose(ctx context.Context, c command, safe bool) (cmdResult, error) {
	ctx, cancel := s.withDeadline(ctx)
	defer cancel()
	tickNow := c.Now
	start := time.Now()
	backoff := 5 * time.Millisecond
	var uncertain error
	for {
		if ctx.Err() != nil {
			if uncertain != nil {
				s.node.metrics.proposal(s.name, "unknown", start)
				return cmdResult{}, fmt.Errorf("%w: shard %q: %v", ErrUnknownOutcome, s.name, uncertain)
			}
			s.node.metrics.proposal(s.name, "unavailable", start)
			return cmdResult{}, fmt.Errorf("%w: shard %q has no leader: %w", ErrUnavailable, s.name, ctx.Err())
		}
		if c.Type == cmdTick && tickNow != 0 {
			c.Now = tickNow // the leader's session time (see Node.tickTime)
		} else {
			c.Now = s.node.clock.Now().UnixNano()
		}
		data, err := json.Marshal(c)
		if err != nil {
			return cmdResult{}, fmt.Errorf("%w: encode command: %v", ErrInvalidArgument, err)
		}
		actx, acancel := context.WithTimeout(ctx, s.node.cfg.AttemptTimeout)
		var res sm.Result
		s.node.nhCall(func() { res, err = s.node.nh.SyncPropose(actx, s.node.nh.GetNoOPSession(s.shardID), data) })
		acancel()
		if err == nil {
			var out cmdResult
			if uerr := json.Unmarshal(res.Data, &out); uerr != nil {
				s.node.metrics.proposal(s.name, "error", start)
				return cmdResult{}, fmt.Errorf("%w: decode result: %v", ErrUnknownOutcome, uerr)
			}
			if res.Value != codeOK {
				if uncertain != nil && (res.Value == codeVersionMismatch || res.Value == codeNotFound || res.Value == codeSessionExpired || res.Value == codeLimitExceeded) {
					s.node.metrics.proposal(s.name, "unknown", start)
					return cmdResult{}, fmt.Errorf("%w: an earlier attempt may have applied (%v); the retry found: %v", ErrUnknownOutcome, uncertain, codeError(res.Value, out.Msg))
				}
				s.node.metrics.proposal(s.name, "rejected", start)
				return out, codeError(res.Value, out.Msg)
			}
			s.node.metrics.proposal(s.name, "ok", start)
			return out, nil
		}
		switch {
		case retryable(err):
			if wait(ctx, backoff) {
				backoff = min(backoff*2, 100*time.Millisecond)
			}
			continue
		case errors.Is(err, dragonboat.ErrTimeout), errors.Is(err, dragonboat.ErrCanceled),
			errors.Is(err, dragonboat.ErrShardClosed), errors.Is(err, dragonboat.ErrAborted):
			if safe && ctx.Err() == nil {
				uncertain = err
				continue
			}
			s.node.metrics.proposal(s.name, "unknown", start)
			return cmdResult{}, fmt.Errorf("%w: shard %q: %v", ErrUnknownOutcome, s.name, err)
		case errors.Is(err, dragonboat.ErrPayloadTooBig):
			s.node.metrics.proposal(s.name, "invalid", start)
			return cmdResult{}, fmt.Errorf("%w: command of %d bytes: %v", ErrInvalidArgument, len(data), err)
		case uncertain != nil:
			s.node.metrics.proposal(s.name, "unknown", start)
			return cmdResult{}, fmt.Errorf("%w: shard %q: %v, then %v", ErrUnknownOutcome, s.name, uncertain, err)
		default:
			// ErrClosed, ErrShardNotFound, ErrTimeoutTooSmall, ErrRejected...:
			// never proposed.
			s.node.metrics.proposal(s.name, "unavailable", start)
			return cmdResult{}, fmt.Errorf("%w: shard %q: %v", ErrUnavailable, s.name, err)
		}
	}
}

// read runs a query linearizably (ReadIndex) or on the local replica.
func (s *shardStore) read(ctx context.Context, q any, stale bool) (any, error) {
	kind := "linearizable"
	if stale {
		kind = "stale"
	}
	if stale {
		var v any
		var err error
		s.node.nhCall(func() { v, err = s.node.nh.StaleRead(s.shardID, q) })
		if err != nil {
			s.node.metrics.read(s.name, kind, "unavailable")
			return nil, fmt.Errorf("%w: shard %q: %v", ErrUnavailable, s.name, err)
		}
		s.node.metrics.read(s.name, kind, "ok")
		return v, nil
	}
	ctx, cancel := s.withDeadline(ctx)
	defer cancel()
	backoff := 5 * time.Millisecond
	for {
		if ctx.Err() != nil {
			s.node.metrics.read(s.name, kind, "unavailable")
			return nil, fmt.Errorf("%w: shard %q: %w", ErrUnavailable, s.name, ctx.Err())
		}
		actx, acancel := context.WithTimeout(ctx, s.node.cfg.AttemptTimeout)
		var v any
		var err error
		s.node.nhCall(func() { v, err = s.node.nh.SyncRead(actx, s.shardID, q) })
		acancel()
		if err == nil {
			s.node.metrics.read(s.name, kind, "ok")
			return v, nil
		}
		if retryable(err) || errors.Is(err, dragonboat.ErrTimeout) {
			if wait(ctx, backoff) {
				backoff = min(backoff*2, 100*time.Millisecond)
			}
			continue
		}
		s.node.metrics.read(s.name, kind, "unavailable")
		if errors.Is(err, ErrInvalidArgument) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: shard %q: %v", ErrUnavailable, s.name, err)
	}
}

// Get implements Store.
func (s *shardStore) Get(ctx context.Context, key string, opts ReadOptions) (KV, error) {
	if err := checkKey("key", key); err != nil {
		return KV{}, err
	}
	v, err := s.read(ctx, getQuery{Key: key}, opts.Stale)
	if err != nil {
		return KV{}, err
	}
	r := v.(getResult)
	if !r.Found {
		return KV{}, fmt.Errorf("%w: key %q", ErrNotFound, key)
	}
	return r.KV, nil
}

// Put implements Store.
func (s *shardStore) Put(ctx context.Context, key string, value []byte, expectedVersion int64, session SessionID) (KV, error) {
	kvs, err := s.Txn(ctx, []Op{{Type: OpPut, Key: key, Value: value, ExpectedVersion: expectedVersion, Session: session}})
	if err != nil {
		return KV{}, err
	}
	return kvs[0], nil
}

// Delete implements Store.
func (s *shardStore) Delete(ctx context.Context, key string, expectedVersion int64) error {
	_, err := s.Txn(ctx, []Op{{Type: OpDelete, Key: key, ExpectedVersion: expectedVersion}})
	return err
}

// List implements Store.
func (s *shardStore) List(ctx context.Context, prefix string, page Page, opts ReadOptions) (ListResult, error) {
	if len(prefix) > MaxKeyBytes {
		return ListResult{}, fmt.Errorf("%w: prefix is %d bytes, limit %d", ErrInvalidArgument, len(prefix), MaxKeyBytes)
	}
	if len(page.After) > MaxKeyBytes {
		return ListResult{}, fmt.Errorf("%w: page.after is %d bytes, limit %d", ErrInvalidArgument, len(page.After), MaxKeyBytes)
	}
	if page.Limit < 0 || page.Limit > MaxPageLimit {
		return ListResult{}, fmt.Errorf("%w: page.limit %d must be in [0, %d]", ErrInvalidArgument, page.Limit, MaxPageLimit)
	}
	limit := page.Limit
	if limit == 0 {
		limit = s.node.cfg.DefaultPageLimit
	}
	v, err := s.read(ctx, listQuery{Prefix: prefix, After: page.After, Limit: limit}, opts.Stale)
	if err != nil {
		return ListResult{}, err
	}
	return v.(ListResult), nil
}

// Txn implements Store.
func (s *shardStore) Txn(ctx context.Context, ops []Op) ([]KV, error) {
	cops, err := s.node.checkOps(ops)
	if err != nil {
		return nil, err
	}
	// The limits travel in the command: every replica enforces the same.
	c := command{Type: cmdTxn, Ops: cops, MaxKeys: int64(s.node.cfg.MaxKeys), MaxBytes: s.node.cfg.MaxTotalBytes}
	res, err := s.propose(ctx, c, guarded(ops))
	if err != nil {
		return nil, err
	}
	return res.KVs, nil
}

// CreateSession implements Store. An in-process caller is no client:
// max_sessions_per_client does not count it.
func (s *shardStore) CreateSession(ctx context.Context, ttl time.Duration) (SessionID, error) {
	return s.createSession(ctx, ttl, "")
}

// createSession opens a session counted against client ("" = none) for
// max_sessions_per_client.
func (s *shardStore) createSession(ctx context.Context, ttl time.Duration, client string) (SessionID, error) {
	if ttl < s.node.cfg.MinSessionTTL || ttl > s.node.cfg.MaxSessionTTL {
		return 0, fmt.Errorf("%w: ttl %v must be in [%v, %v]", ErrInvalidArgument, ttl, s.node.cfg.MinSessionTTL, s.node.cfg.MaxSessionTTL)
	}
	c := command{Type: cmdCreateSess, TTL: int64(ttl)}
	if client != "" {
		c.Client, c.MaxSessions = client, int64(s.node.cfg.MaxSessionsPerClient)
	}
	res, err := s.propose(ctx, c, false)
	if err != nil {
		return 0, err
	}
	return SessionID(res.Session), nil
}

// KeepAlive implements Store.
func (s *shardStore) KeepAlive(ctx context.Context, id SessionID) error {
	if id == 0 {
		return fmt.Errorf("%w: session must be non-zero", ErrInvalidArgument)
	}
	_, err := s.propose(ctx, command{Type: cmdKeepAlive, Session: uint64(id)}, true)
	return err
}

// CloseSession implements Store.
func (s *shardStore) CloseSession(ctx context.Context, id SessionID) error {
	if id == 0 {
		return fmt.Errorf("%w: session must be non-zero", ErrInvalidArgument)
	}
	_, err := s.propose(ctx, command{Type: cmdCloseSession, Session: uint64(id)}, false)
	return err
}

// watchPage is how many history events one watch lookup returns.
const watchPage = 256

// Watch implements Store. It reads the local replica's history, so it
// follows this replica's applied state; a follower's watch lags a little.
// An in-process caller is no client: max_watches_per_client does not count
// it.
func (s *shardStore) Watch(ctx context.Context, prefix string, afterRevision int64) (<-chan Event, <-chan error) {
	return s.watch(ctx, prefix, afterRevision, "")
}

// watch is Watch counted against client ("" = none) for
// max_watches_per_client.
func (s *shardStore) watch(ctx context.Context, prefix string, afterRevision int64, client string) (<-chan Event, <-chan error) {
	evc := make(chan Event, 64)
	errc := make(chan error, 1)
	fail := func(err error) {
		close(evc)
		errc <- err
		close(errc)
	}
	if len(prefix) > MaxKeyBytes {
		fail(fmt.Errorf("%w: prefix is %d bytes, limit %d", ErrInvalidArgument, len(prefix), MaxKeyBytes))
		return evc, errc
	}
	if afterRevision < 0 {
		fail(fmt.Errorf("%w: after_revision %d must not be negative", ErrInvalidArgument, afterRevision))
		return evc, errc
	}
	if err := s.node.acquireWatch(client); err != nil {
		fail(err)
		return evc, errc
	}
	go func() {
		defer s.node.releaseWatch(client)
		wake, unsubscribe := s.notify.subscribe()
		defer unsubscribe()
		scanned := afterRevision
		for {
			var v any
			var err error
			s.node.nhCall(func() {
				v, err = s.node.nh.StaleRead(s.shardID, histQuery{Prefix: prefix, After: scanned, Limit: watchPage})
			})
			if errors.Is(err, dragonboat.ErrShardNotInitialized) {
				// The replica is still loading its snapshot after a start.
				if !wait(ctx, 20*time.Millisecond) {
					fail(nil)
					return
				}
				continue
			}
			if err != nil {
				fail(fmt.Errorf("%w: shard %q: %v", ErrUnavailable, s.name, err))
				return
			}
			r := v.(histResult)
			if r.Compacted {
				fail(fmt.Errorf("%w: revision %d is older than the retained history (compacted through %d)", ErrCompacted, scanned, r.CompactedRev))
				return
			}
			for _, ev := range r.Events {
				select {
				case evc <- ev:
				case <-ctx.Done():
					fail(nil)
					return
				}
			}
			scanned = r.ScannedTo
			if r.More {
				continue
			}
			select {
			case <-wake:
			case <-ctx.Done():
				fail(nil)
				return
			case <-s.notify.done:
				fail(fmt.Errorf("%w: shard %q stopped on this node", ErrUnavailable, s.name))
				return
			}
		}
	}()
	return evc, errc
}

// checkKey validates a key and names the field in the error.
func checkKey(field, key string) error {
	if key == "" {
		return fmt.Errorf("%w: %s is empty", ErrInvalidArgument, field)
	}
	if len(key) > MaxKeyBytes {
		return fmt.Errorf("%w: %s is %d bytes, limit %d", ErrInvalidArgument, field, len(key), MaxKeyBytes)
	}
	return nil
}

// checkOps validates a transaction before it is proposed, so bad input
// changes nothing.
func (n *Node) checkOps(ops []Op) ([]cmdOp, error) {
	if len(ops) == 0 {
		return nil, fmt.Errorf("%w: ops is empty", ErrInvalidArgument)
	}
	if len(ops) > n.cfg.MaxTxnOps {
		return nil, fmt.Errorf("%w: ops has %d operations, limit %d", ErrInvalidArgument, len(ops), n.cfg.MaxTxnOps)
	}
	total := 0
	seen := make(map[string]int, len(ops))
	out := make([]cmdOp, len(ops))
	for i, op := range ops {
		field := "key"
		if len(ops) > 1 {
			field = fmt.Sprintf("ops[%d].key", i)
		}
		if err := checkKey(field, op.Key); err != nil {
			return nil, err
		}
		if j, dup := seen[op.Key]; dup {
			return nil, fmt.Errorf("%w: %s %q repeats ops[%d].key", ErrInvalidArgument, field, op.Key, j)
		}
		seen[op.Key] = i
		if op.Type != OpPut && op.Type != OpDelete && op.Type != OpCheck {
			return nil, fmt.Errorf("%w: ops[%d].type %d is not put, delete or check", ErrInvalidArgument, i, op.Type)
		}
		if op.ExpectedVersion < MustNotExist {
			return nil, fmt.Errorf("%w: expected_version %d must be -1, 0 or a version", ErrInvalidArgument, op.ExpectedVersion)
		}
		if op.Type == OpPut && len(op.Value) > n.cfg.MaxValueBytes {
			vf := "value"
			if len(ops) > 1 {
				vf = fmt.Sprintf("ops[%d].value", i)
			}
			return nil, fmt.Errorf("%w: %s is %d bytes, limit %d", ErrInvalidArgument, vf, len(op.Value), n.cfg.MaxValueBytes)
		}
		if op.Type != OpPut && (len(op.Value) > 0 || op.Session != 0) {
			return nil, fmt.Errorf("%w: ops[%d] is not a put but has a value or session", ErrInvalidArgument, i)
		}
		total += len(op.Key) + len(op.Value)
		out[i] = cmdOp{Type: op.Type, Key: op.Key, Value: op.Value, Expected: op.ExpectedVersion, Session: uint64(op.Session)}
	}
	if total > n.cfg.MaxTxnBytes {
		return nil, fmt.Errorf("%w: ops hold %d bytes of keys and values, limit %d", ErrInvalidArgument, total, n.cfg.MaxTxnBytes)
	}
	return out, nil
}

var _ sm.IStateMachine = (*stateMachine)(nil)
