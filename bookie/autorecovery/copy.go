package autorecovery

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"github.com/meridianmq/meridian/bookie/ledger"
	"github.com/meridianmq/meridian/topology"
)

// bookiePool holds one gRPC connection per bookie address.
type bookiePool struct {
	opts []grpc.DialOption

	mu     sync.Mutex // guards the fields below
	conns  map[string]*grpc.ClientConn
	closed bool
}

func newBookiePool(cfg WorkerConfig) *bookiePool {
	msg := cfg.MaxEntryBytes + (1 << 20) // payload plus headers
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(msg), grpc.MaxCallSendMsgSize(msg)),
	}
	return &bookiePool{opts: append(opts, cfg.DialOptions...), conns: map[string]*grpc.ClientConn{}}
}

func (p *bookiePool) client(addr string) (bookiev1.BookieClient, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	cc := p.conns[addr]
	if cc == nil {
		var err error
		if cc, err = grpc.NewClient(addr, p.opts...); err != nil {
			return nil, fmt.Errorf("autorecovery: dial bookie at %s: %w", addr, err)
		}
		p.conns[addr] = cc
	}
	return bookiev1.NewBookieClient(cc), nil
}

func (p *bookiePool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, cc := range p.conns {
		cc.Close()
	}
	p.conns = nil
}

// writeSetHas reports whether ensemble position p is in entry e's write set
// (positions e mod E .. e+Qw-1 mod E).
func writeSetHas(e int64, ensemble, writeQuorum, p int) bool {
	d := (int64(p) - e%int64(ensemble) + int64(ensemble)) % int64(ensemble)
	return d < int64(writeQuorum)
}

// segmentEnd returns the last entry of segment s (FirstEntry-1 when empty).
func segmentEnd(md *ledger.Metadata, s int) int64 {
	if s+1 < len(md.Segments) {
		return md.Segments[s+1].FirstEntry - 1
	}
	return md.LastEntry
}

// copyStats counts what one segment copy moved.
type copyStats struct {
	entries, bytes int64
}

// copySegment copies to target every entry of segment s whose write set
// holds position p, reading each from another replica of its write set.
// Every add is durable on target when this returns nil.
func (w *Worker) copySegment(ctx context.Context, md *ledger.Metadata, s, p int, target topology.BookieInfo,
	live map[string]topology.BookieInfo) (copyStats, error) {
	first, last := md.Segments[s].FirstEntry, segmentEnd(md, s)
	var st copyStats
	if last < first {
		return st, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex // guards st and firstErr
		firstErr error
		wg       sync.WaitGroup
	)
	todo := make(chan int64)
	for range w.cfg.CopyConcurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := range todo {
				n, err := w.copyEntry(ctx, md, s, p, e, target, live)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
					cancel()
				}
				if err == nil {
					st.entries++
					st.bytes += int64(n)
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for e := first; e <= last; e++ {
		if !writeSetHas(e, md.Ensemble, md.WriteQuorum, p) {
			continue
		}
		select {
		case todo <- e:
		case <-ctx.Done():
			break feed
		}
	}
	close(todo)
	wg.Wait()
	if firstErr != nil {
		return st, firstErr
	}
	return st, ctx.Err()
}

// copyEntry reads entry e from a surviving replica and recovery-adds it to
// target; it returns the payload size.
func (w *Worker) copyEntry(ctx context.Context, md *ledger.Metadata, s, p int, e int64, target topology.BookieInfo,
	live map[string]topology.BookieInfo) (int, error) {
	seg := md.Segments[s]
	// Registered replicas first; unregistered ones (maybe lost too) and the
	// lost bookie itself (reachable when decommissioned) last.
	var first, later []topology.BookieInfo
	for i := range md.WriteQuorum {
		pos := int((e + int64(i)) % int64(md.Ensemble))
		b := seg.Ensemble[pos]
		if pos == p {
			continue
		}
		if r, ok := live[b.ID]; ok {
			first = append(first, r)
		} else {
			later = append(later, b)
		}
	}
	if r, ok := live[seg.Ensemble[p].ID]; ok {
		later = append(later, r)
	}
	var errs []error
	var data []byte
	found := false
	for _, b := range append(first, later...) {
		d, err := w.readEntry(ctx, b, md.ID, e)
		if err == nil {
			data, found = d, true
			break
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		errs = append(errs, fmt.Errorf("%s: %w", b.ID, err))
	}
	if !found {
		return 0, fmt.Errorf("%w %d/%d: %w", ErrNoReplica, md.ID, e, errors.Join(errs...))
	}
	if err := w.addEntry(ctx, target, md.ID, e, md.LastEntry, data); err != nil {
		return 0, err
	}
	return len(data), nil
}

func (w *Worker) readEntry(ctx context.Context, b topology.BookieInfo, id, e int64) ([]byte, error) {
	c, err := w.pool.client(b.Address)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, w.cfg.RPCTimeout)
	defer cancel()
	// The request names the instance: a re-formatted or impostor bookie at
	// the address answers "wrong bookie", never another instance's data.
	resp, err := c.ReadEntry(rctx, &bookiev1.ReadEntryRequest{LedgerId: id, EntryId: e,
		ExpectedBookieId: b.ID, ExpectedInstanceId: b.InstanceID})
	if err != nil {
		return nil, err
	}
	if resp.LedgerId != id || resp.EntryId != e {
		return nil, fmt.Errorf("bookie answered entry %d/%d for %d/%d", resp.LedgerId, resp.EntryId, id, e)
	}
	return resp.Payload, nil
}

// addEntry writes one entry to target as a recovery add (accepted even if
// the ledger is fenced there), retrying while the bookie's queue is full.
func (w *Worker) addEntry(ctx context.Context, target topology.BookieInfo, id, e, lac int64, data []byte) error {
	c, err := w.pool.client(target.Address)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, w.cfg.RPCTimeout)
		_, err = c.AddEntry(rctx, &bookiev1.AddEntryRequest{
			LedgerId: id, EntryId: e, Payload: data, LastAddConfirmed: lac, RecoveryAdd: true,
			ExpectedBookieId: target.ID, ExpectedInstanceId: target.InstanceID,
		})
		cancel()
		if err == nil {
			return nil
		}
		if status.Code(err) != codes.ResourceExhausted || attempt >= 50 {
			return fmt.Errorf("autorecovery: add %d/%d to %s: %w", id, e, target.ID, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
