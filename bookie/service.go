package bookie

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"github.com/meridianmq/meridian/internal/budget"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
)

// service implements bookiev1.BookieServer over the storage engine.
type service struct {
	bookiev1.UnimplementedBookieServer
	srv *Server
}

// maxStreamInFlight bounds the adds one AddEntries stream may have queued
// and unanswered; the stream stops reading requests beyond it (gRPC flow
// control then pushes back on the client).
const maxStreamInFlight = 1024

func (s *Server) validateAdd(r *bookiev1.AddEntryRequest) error {
	switch {
	case r.LedgerId < 0:
		return fmt.Errorf("%w: ledger_id must be >= 0, got %d", ErrInvalidArgument, r.LedgerId)
	case r.EntryId < 0:
		return fmt.Errorf("%w: entry_id must be >= 0, got %d", ErrInvalidArgument, r.EntryId)
	case r.LastAddConfirmed < -1:
		return fmt.Errorf("%w: last_add_confirmed must be >= -1, got %d", ErrInvalidArgument, r.LastAddConfirmed)
	case len(r.Payload) > s.cfg.MaxEntryBytes:
		return fmt.Errorf("%w: payload is %d bytes, limit MaxEntryBytes=%d", ErrInvalidArgument, len(r.Payload), s.cfg.MaxEntryBytes)
	}
	return nil
}

// addAsync validates and queues one add; done is called exactly once.
func (s *Server) addAsync(ctx context.Context, r *bookiev1.AddEntryRequest, done func(error)) {
	if err := s.validateAdd(r); err != nil {
		s.metrics.addErrors.WithLabelValues(codes.InvalidArgument.String()).Inc()
		done(err)
		return
	}
	if ro, _ := s.st.readOnly(); ro {
		s.metrics.addErrors.WithLabelValues(codes.Unavailable.String()).Inc()
		done(ErrReadOnly)
		return
	}
	if !r.RecoveryAdd && s.inLimbo(r.LedgerId) {
		// The previous instance may have held earlier entries of this
		// ledger: accepting a normal add would make it look held here.
		// The writer replaces this bookie instead.
		s.metrics.addErrors.WithLabelValues(codes.Unavailable.String()).Inc()
		done(fmt.Errorf("%w: ledger %d: re-formatted bookie in limbo refuses normal adds to ledgers its previous instance may have held", ErrLedgerUnknown, r.LedgerId))
		return
	}
	o := &op{
		kind: recEntry, ledger: r.LedgerId, entry: r.EntryId, lac: r.LastAddConfirmed,
		recovery: r.RecoveryAdd, start: time.Now(), payload: len(r.Payload),
		body: r.Payload, done: func(res opResult) { done(res.err) },
	}
	// The CRC is computed here, on the stream's goroutine, not on the
	// journal goroutine; the payload is copied only into the write buffer.
	encodeHeader(&o.hdr, recEntry, r.LedgerId, r.EntryId, r.LastAddConfirmed, r.Payload)
	o.rec = o.hdr[:]
	if err := s.st.submit(ctx, o); err != nil {
		c, _ := ToStatus(err)
		s.metrics.addErrors.WithLabelValues(c.String()).Inc()
		done(err)
	}
}

func (svc *service) AddEntry(ctx context.Context, r *bookiev1.AddEntryRequest) (*bookiev1.AddEntryResponse, error) {
	if err := svc.srv.checkIdentity(r, false); err != nil {
		return nil, GRPCError(err)
	}
	ch := make(chan error, 1)
	svc.srv.addAsync(ctx, r, func(err error) { ch <- err })
	select {
	case err := <-ch:
		if err != nil {
			return nil, GRPCError(err)
		}
	case <-ctx.Done():
		// The add may still complete; the client sees an unknown outcome.
		return nil, GRPCError(ctx.Err())
	}
	return &bookiev1.AddEntryResponse{LedgerId: r.LedgerId, EntryId: r.EntryId, RequestId: r.RequestId}, nil
}

// MaxAddBatchBytes is the payload bytes a client may put into one
// AddEntriesRequest with more than one entry (a single entry may be up to
// Config.MaxEntryBytes). The bookie accepts messages of
// max(MaxEntryBytes, MaxAddBatchBytes) plus framing.
const MaxAddBatchBytes = 1 << 20

// maxResultsPerMessage bounds the results packed into one
// AddEntriesResponse.
const maxResultsPerMessage = 1024

func (svc *service) AddEntries(stream bookiev1.Bookie_AddEntriesServer) error {
	ctx := stream.Context()
	// An add holds a slot of sem and its payload's bytes of held from the
	// moment it is read until its answer is sent: while either is used up
	// the receiving goroutine waits, so it stops reading the stream.
	held := newStreamHold(svc.srv.cfg.MaxInflightAddBytesPerStream, svc.srv.metrics.streamAddBytes)
	defer held.close()
	if testStreamBudgetHook != nil {
		testStreamBudgetHook(held.b)
	}
	resps := make(chan streamAnswer, maxStreamInFlight)
	sem := make(chan struct{}, maxStreamInFlight)
	recvErr := make(chan error, 1)
	go func() {
		for {
			batch, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			idErr := svc.srv.checkIdentity(batch, false)
			for _, r := range batch.Entries {
				select {
				case sem <- struct{}{}:
				case <-ctx.Done():
					recvErr <- ctx.Err()
					return
				}
				n := int64(len(r.Payload))
				if err := held.acquire(ctx, n); err != nil {
					<-sem
					recvErr <- err
					return
				}
				answer := func(err error) {
					c, m := ToStatus(err)
					resps <- streamAnswer{bytes: n, resp: &bookiev1.AddEntryResponse{LedgerId: r.LedgerId, EntryId: r.EntryId, RequestId: r.RequestId, Code: int32(c), Message: m}}
				}
				if idErr != nil {
					answer(idErr)
					continue
				}
				svc.srv.addAsync(ctx, r, answer)
			}
		}
	}()
	inflight := func() int { return len(sem) }
	recvDone := false
	out := &bookiev1.AddEntriesResponse{}
	for {
		if recvDone && inflight() == 0 {
			return nil
		}
		select {
		case a := <-resps:
			// Pack every result that is ready (a group commit answers many
			// at once) into one message.
			out.Results = append(out.Results[:0], a.resp)
			answered := a.bytes
		more:
			for len(out.Results) < maxResultsPerMessage {
				select {
				case a := <-resps:
					out.Results = append(out.Results, a.resp)
					answered += a.bytes
				default:
					break more
				}
			}
			err := stream.Send(out)
			// Sent (or the stream is broken): the adds are answered.
			held.release(answered)
			for range out.Results {
				<-sem
			}
			clear(out.Results)
			if err != nil {
				return err
			}
		case err := <-recvErr:
			if err != io.EOF {
				return err
			}
			recvDone = true
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// testStreamBudgetHook, set by tests only, receives each new stream's
// budget.
var testStreamBudgetHook func(*budget.Budget)

// streamAnswer is one add's answer on its way to the stream, with the
// payload bytes it holds of the stream's budget.
type streamAnswer struct {
	bytes int64
	resp  *bookiev1.AddEntryResponse
}

// streamHold is what one AddEntries stream holds of its budget
// (MaxInflightAddBytesPerStream), mirrored in a gauge summed over streams.
type streamHold struct {
	b     *budget.Budget
	gauge prometheus.Gauge

	mu     sync.Mutex
	held   int64
	closed bool
}

func newStreamHold(limit int64, gauge prometheus.Gauge) *streamHold {
	return &streamHold{b: budget.New(limit), gauge: gauge}
}

// acquire takes n bytes, waiting while the stream's unanswered adds hold
// the budget; it fails with ErrTooManyInFlight naming the limit when ctx
// ends first.
func (h *streamHold) acquire(ctx context.Context, n int64) error {
	if err := h.b.Acquire(ctx, n); err != nil {
		return fmt.Errorf("%w: stream's unanswered adds hold %d bytes (max_inflight_add_bytes_per_stream=%d): %w",
			ErrTooManyInFlight, h.b.InUse(), h.b.Limit(), err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		h.b.Release(n)
		return ErrStopping
	}
	h.held += n
	h.gauge.Add(float64(n))
	return nil
}

// release gives back n bytes of answered adds (nothing after close).
func (h *streamHold) release(n int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.held -= n
	h.gauge.Sub(float64(n))
	h.b.Release(n)
}

// close takes what the stream still holds out of the gauge: the stream
// ended, its budget goes with it.
func (h *streamHold) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gauge.Sub(float64(h.held))
	h.held, h.closed = 0, true
}

func (svc *service) ReadEntry(ctx context.Context, r *bookiev1.ReadEntryRequest) (*bookiev1.ReadEntryResponse, error) {
	s := svc.srv
	if err := s.checkIdentity(r, false); err != nil {
		return nil, GRPCError(err)
	}
	if r.LedgerId < 0 {
		return nil, GRPCError(fmt.Errorf("%w: ledger_id must be >= 0, got %d", ErrInvalidArgument, r.LedgerId))
	}
	if r.EntryId < -1 {
		return nil, GRPCError(fmt.Errorf("%w: entry_id must be >= -1 (-1 = last), got %d", ErrInvalidArgument, r.EntryId))
	}
	if r.Fence {
		if _, _, err := s.fence(ctx, r.LedgerId); err != nil {
			return nil, GRPCError(err)
		}
	}
	t0 := time.Now()
	payload, info, err := s.st.read(r.LedgerId, r.EntryId)
	err = s.limboErr(r.LedgerId, err)
	if err != nil {
		c, _ := ToStatus(err)
		s.metrics.readErrors.WithLabelValues(c.String()).Inc()
		return nil, GRPCError(err)
	}
	s.metrics.readLatency.Observe(time.Since(t0).Seconds())
	s.metrics.readEntries.Inc()
	s.metrics.readBytes.Add(float64(len(payload)))
	return &bookiev1.ReadEntryResponse{LedgerId: r.LedgerId, EntryId: info.entry, Payload: payload,
		LastAddConfirmed: info.lac, Fenced: info.fenced}, nil
}

func (svc *service) ReadRange(r *bookiev1.ReadRangeRequest, stream bookiev1.Bookie_ReadRangeServer) error {
	s := svc.srv
	if err := s.checkIdentity(r, false); err != nil {
		return GRPCError(err)
	}
	switch {
	case r.LedgerId < 0:
		return GRPCError(fmt.Errorf("%w: ledger_id must be >= 0, got %d", ErrInvalidArgument, r.LedgerId))
	case r.FirstEntryId < 0:
		return GRPCError(fmt.Errorf("%w: first_entry_id must be >= 0, got %d", ErrInvalidArgument, r.FirstEntryId))
	case r.LastEntryId < r.FirstEntryId:
		return GRPCError(fmt.Errorf("%w: last_entry_id (%d) must be >= first_entry_id (%d)", ErrInvalidArgument, r.LastEntryId, r.FirstEntryId))
	case r.MaxBytes < 0:
		return GRPCError(fmt.Errorf("%w: max_bytes must be >= 0, got %d", ErrInvalidArgument, r.MaxBytes))
	}
	limit := s.cfg.ReadRangeMaxBytes
	if r.MaxBytes > 0 && r.MaxBytes < limit {
		limit = r.MaxBytes
	}
	var sent int64
	for e := r.FirstEntryId; e <= r.LastEntryId; e++ {
		if err := stream.Context().Err(); err != nil {
			return GRPCError(err)
		}
		t0 := time.Now()
		// Entries stored back to back are read with one pread per run
		// (at most maxRunBytes); anything unusual goes through read.
		run, info := s.st.readRun(r.LedgerId, e, r.LastEntryId, limit-sent)
		if len(run) > 0 {
			s.metrics.readRuns.Inc()
			per := time.Since(t0).Seconds() / float64(len(run))
			for i, payload := range run {
				s.metrics.readLatency.Observe(per)
				s.metrics.readEntries.Inc()
				s.metrics.readBytes.Add(float64(len(payload)))
				if err := stream.Send(&bookiev1.ReadEntryResponse{LedgerId: r.LedgerId, EntryId: e + int64(i), Payload: payload,
					LastAddConfirmed: info.lac, Fenced: info.fenced}); err != nil {
					return err
				}
				sent += int64(len(payload))
			}
			if sent >= limit {
				return nil
			}
			e += int64(len(run)) - 1
			continue
		}
		payload, info, err := s.st.read(r.LedgerId, e)
		err = s.limboErr(r.LedgerId, err)
		if err != nil {
			c, _ := ToStatus(err)
			s.metrics.readErrors.WithLabelValues(c.String()).Inc()
			return GRPCError(err)
		}
		s.metrics.readLatency.Observe(time.Since(t0).Seconds())
		s.metrics.readEntries.Inc()
		s.metrics.readBytes.Add(float64(len(payload)))
		if err := stream.Send(&bookiev1.ReadEntryResponse{LedgerId: r.LedgerId, EntryId: e, Payload: payload,
			LastAddConfirmed: info.lac, Fenced: info.fenced}); err != nil {
			return err
		}
		sent += int64(len(payload))
		if sent >= limit {
			return nil
		}
	}
	return nil
}

func (svc *service) ReadLastAddConfirmed(ctx context.Context, r *bookiev1.ReadLastAddConfirmedRequest) (*bookiev1.ReadLastAddConfirmedResponse, error) {
	if err := svc.srv.checkIdentity(r, false); err != nil {
		return nil, GRPCError(err)
	}
	if r.LedgerId < 0 {
		return nil, GRPCError(fmt.Errorf("%w: ledger_id must be >= 0, got %d", ErrInvalidArgument, r.LedgerId))
	}
	lac, last, fenced, err := svc.srv.st.ledgerInfo(r.LedgerId)
	if err = svc.srv.limboErr(r.LedgerId, err); err != nil {
		return nil, GRPCError(err)
	}
	return &bookiev1.ReadLastAddConfirmedResponse{LastAddConfirmed: lac, LastEntryId: last, Fenced: fenced}, nil
}

func (svc *service) Fence(ctx context.Context, r *bookiev1.FenceRequest) (*bookiev1.FenceResponse, error) {
	if err := svc.srv.checkIdentity(r, false); err != nil {
		return nil, GRPCError(err)
	}
	if r.LedgerId < 0 {
		return nil, GRPCError(fmt.Errorf("%w: ledger_id must be >= 0, got %d", ErrInvalidArgument, r.LedgerId))
	}
	last, lac, err := svc.srv.fence(ctx, r.LedgerId)
	if err != nil {
		return nil, GRPCError(err)
	}
	return &bookiev1.FenceResponse{LastEntryId: last, LastAddConfirmed: lac}, nil
}

func (svc *service) DeleteLedger(ctx context.Context, r *bookiev1.DeleteLedgerRequest) (*bookiev1.DeleteLedgerResponse, error) {
	if err := svc.srv.checkIdentity(r, false); err != nil {
		return nil, GRPCError(err)
	}
	if r.LedgerId < 0 {
		return nil, GRPCError(fmt.Errorf("%w: ledger_id must be >= 0, got %d", ErrInvalidArgument, r.LedgerId))
	}
	if err := svc.srv.deleteLedger(ctx, r.LedgerId); err != nil {
		return nil, GRPCError(err)
	}
	return &bookiev1.DeleteLedgerResponse{}, nil
}

func (svc *service) GetInfo(ctx context.Context, r *bookiev1.GetInfoRequest) (*bookiev1.GetInfoResponse, error) {
	s := svc.srv
	if err := s.checkIdentity(r, true); err != nil {
		return nil, GRPCError(err)
	}
	ro, reason := s.st.readOnly()
	u := s.st.usage()
	return &bookiev1.GetInfoResponse{BookieId: s.cfg.ID, Address: s.advertised(), Region: s.cfg.Region, Rack: s.cfg.Rack,
		ReadOnly: ro, ReadOnlyReason: reason, DiskUsedBytes: u.Used(), DiskTotalBytes: u.Total,
		LedgerCount: int64(s.st.ledgerCount()), MaxEntryBytes: int64(s.cfg.MaxEntryBytes),
		InstanceId: s.instanceID, Limbo: s.InLimbo()}, nil
}
