package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/internal/wire"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"
)

// clientService implements clientv1.MeridianServer.
type clientService struct {
	clientv1.UnimplementedMeridianServer
	b *Server
}

var nameCounter atomic.Int64

// batchBytes is the size a send's batch declares once decompressed (its
// payload, uncompressed).
func batchBytes(sd *clientv1.Send) int64 {
	if sd.GetCompression() == clientv1.CompressionType_COMPRESSION_TYPE_NONE {
		return max(sd.GetUncompressedSize(), int64(len(sd.GetPayload())))
	}
	return sd.GetUncompressedSize()
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok {
		return p.Addr.String()
	}
	return ""
}

func (cs *clientService) Lookup(ctx context.Context, req *clientv1.LookupRequest) (*clientv1.LookupResponse, error) {
	name, err := ParseTopic(req.GetTopic())
	if err != nil {
		return nil, GRPCError(err)
	}
	if err := cs.b.refusePartitionedBase(ctx, name); err != nil { // partitioned.go
		return nil, GRPCError(err)
	}
	if err := cs.b.checkAutoTopicCreation(ctx, name); err != nil { // limits.go
		return nil, GRPCError(err)
	}
	o, err := cs.b.lookup(ctx, name, req.GetAuthoritative())
	if err != nil {
		return nil, GRPCError(err)
	}
	return &clientv1.LookupResponse{BrokerUrl: o.GRPC, HttpUrl: o.HTTP, BrokerId: o.BrokerID, Authoritative: true}, nil
}

func (cs *clientService) Produce(stream clientv1.Meridian_ProduceServer) error {
	b := cs.b
	ctx := stream.Context()
	req, err := stream.Recv()
	if err != nil {
		return err
	}
	open := req.GetOpen()
	if open == nil {
		return GRPCError(fmt.Errorf("%w: the first produce request must be open", ErrInvalidArgument))
	}
	name, err := ParseTopic(open.GetTopic())
	if err != nil {
		return GRPCError(err)
	}
	pname := open.GetProducerName()
	if pname == "" {
		pname = fmt.Sprintf("%s-%d-%d", b.cfg.BrokerID, time.Now().UnixNano(), nameCounter.Add(1))
	} else if len(pname) > 256 {
		return GRPCError(fmt.Errorf("%w: producer_name is %d bytes, limit 256", ErrInvalidArgument, len(pname)))
	} else if isReplName(pname) {
		return GRPCError(fmt.Errorf("%w: producer_name %q: names starting with %q are reserved for replication", ErrInvalidArgument, pname, ReplDedupPrefix))
	} else if isFromName(pname) {
		return GRPCError(fmt.Errorf("%w: producer_name %q: names starting with %q are reserved for failover dedup", ErrInvalidArgument, pname, FailoverDedupPrefix))
	}
	if err := validateFailoverFrom(open.GetFailoverFrom()); err != nil {
		return GRPCError(err)
	}
	if err := validateFailoverIdentity(open.GetFailoverIdentity()); err != nil {
		return GRPCError(err)
	}
	if err := b.checkAutoTopicCreation(ctx, name); err != nil { // limits.go
		return GRPCError(err)
	}
	t, err := b.getTopic(ctx, name, true)
	if err != nil {
		return GRPCError(err)
	}
	p := &producer{name: pname, identity: open.GetFailoverIdentity(), addr: peerAddr(ctx), out: make(chan *clientv1.ProduceResponse, b.cfg.MaxPendingSends), done: make(chan struct{})}
	if p.schemaVersion, err = b.producerSchema(ctx, t, open.GetSchema()); err != nil { // schema.go
		return GRPCError(err)
	}
	if p.identity != "" {
		p.ident = identDedupName(p.identity, pname)
	}
	// Security on: the name may be bound to another role (producer_bind.go).
	p.role, p.bound = b.producerRole(ctx)
	if err := b.checkProducerOpen(ctx, t, pname, p.dedupName()); err != nil {
		return err
	}
	maxProducers := t.maxProducers() // limits.go
	t.mu.Lock()
	if t.closing {
		t.mu.Unlock()
		return GRPCError(&notOwnedError{})
	}
	if _, busy := t.producers[pname]; busy {
		t.mu.Unlock()
		return GRPCError(fmt.Errorf("%w: producer %q is already connected to %s", ErrProducerBusy, pname, name))
	}
	if limitReached(maxProducers, len(t.producers)) {
		t.mu.Unlock()
		return GRPCError(limitError("max_producers_per_topic", maxProducers, fmt.Sprintf("%s already has %d producers", name, maxProducers)))
	}
	t.producers[pname] = p
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		if t.producers[pname] == p {
			delete(t.producers, pname)
		}
		t.mu.Unlock()
	}()
	if err := stream.Send(&clientv1.ProduceResponse{Kind: &clientv1.ProduceResponse_Opened{Opened: &clientv1.ProducerOpened{
		ProducerName: pname, LastSequenceId: t.ml.openSequence(pname, p.ident, b.cfg.Region, open.GetFailoverFrom()), MaxMessageBytes: int64(b.cfg.MaxMessageBytes),
		Region: b.cfg.Region, SchemaVersion: p.schemaVersion,
	}}}); err != nil {
		return err
	}
	// The receiving goroutine handles sends itself: when the topic's queue
	// is full it blocks there (back-pressure on the client), while this
	// goroutine keeps draining receipts, so the two never wait on each other.
	// inflight counts sends whose receipt is not yet queued.
	var inflight atomic.Int64
	// Each send holds its payload's bytes in the connection's, topic's and
	// broker's budgets until its receipt is queued (sendbudget.go).
	connKey := peerAddr(ctx)
	hold := &sendHold{conn: b.sendConns.get(connKey), topic: t.sendBytes, broker: b.sendBytes}
	defer b.sendConns.put(connKey)
	defer hold.close()
	recvErr := make(chan error, 1)
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			sd := r.GetSend()
			if sd == nil {
				recvErr <- GRPCError(fmt.Errorf("%w: after open, produce requests must be send", ErrInvalidArgument))
				return
			}
			release, err := hold.take(ctx, int64(len(sd.GetPayload()))+sendOverheadBytes)
			if err != nil {
				recvErr <- err
				return
			}
			inflight.Add(1)
			cs.handleSend(ctx, t, p, sd, &inflight, release)
		}
	}()
	for {
		select {
		case r := <-p.out:
			if err := stream.Send(r); err != nil {
				return err
			}
		case err := <-recvErr:
			// Flush receipts of what was already sent before ending.
			deadline := time.After(b.cfg.OperationTimeout)
			for inflight.Load() > 0 || len(p.out) > 0 {
				select {
				case r := <-p.out:
					if serr := stream.Send(r); serr != nil {
						return serr
					}
				case <-deadline:
					return err
				case <-p.done:
					return err
				}
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-p.done:
			for len(p.out) > 0 {
				if err := stream.Send(<-p.out); err != nil {
					return err
				}
			}
			return GRPCError(&notOwnedError{})
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// handleSend validates and queues one send; release gives back its
// budget bytes when its receipt is queued.
func (cs *clientService) handleSend(ctx context.Context, t *topic, p *producer, sd *clientv1.Send, inflight *atomic.Int64, releaseBudget func()) {
	b := cs.b
	reply := func(r *clientv1.SendReceipt) {
		releaseBudget()
		inflight.Add(-1)
		select {
		case p.out <- &clientv1.ProduceResponse{Kind: &clientv1.ProduceResponse_Receipt{Receipt: r}}:
		case <-p.done:
		}
	}
	fail := func(err error) {
		reply(&clientv1.SendReceipt{SequenceId: sd.GetSequenceId(), Error: ToError(err)})
	}
	if n := len(sd.GetPayload()); n > b.cfg.MaxMessageBytes {
		fail(fmt.Errorf("%w: payload is %d bytes, limit %d (max_message_bytes)", ErrMessageTooLarge, n, b.cfg.MaxMessageBytes))
		return
	}
	if sd.GetNumMessages() < 1 {
		fail(fmt.Errorf("%w: num_messages %d must be >= 1", ErrInvalidArgument, sd.GetNumMessages()))
		return
	}
	if n := sd.GetNumMessages(); int64(n) > int64(b.cfg.MaxBatchMessages) {
		fail(fmt.Errorf("%w: batch of %d messages, limit %d (max_batch_messages)", ErrMessageTooLarge, n, b.cfg.MaxBatchMessages))
		return
	}
	if u := batchBytes(sd); u > b.cfg.MaxBatchBytes {
		fail(fmt.Errorf("%w: batch of %d bytes uncompressed, limit %d (max_batch_bytes)", ErrMessageTooLarge, u, b.cfg.MaxBatchBytes))
		return
	}
	if _, ok := clientv1.CompressionType_name[int32(sd.GetCompression())]; !ok {
		fail(fmt.Errorf("%w: compression %d is not NONE, ZSTD or S2", ErrInvalidArgument, sd.GetCompression()))
		return
	}
	if u := sd.GetUncompressedSize(); u < 0 || u > wire.MaxUncompressedBytes {
		fail(fmt.Errorf("%w: uncompressed_size %d must be in [0, %d]", ErrMessageTooLarge, u, wire.MaxUncompressedBytes))
		return
	}
	// highest = sequence_id + num_messages - 1 would wrap negative (or
	// sit at the very top): a poisoned dedup mark, never a real batch
	// (seqlimit.go).
	if err := checkBatchSeq("", sd.GetSequenceId(), sd.GetNumMessages()); err != nil {
		fail(err)
		return
	}
	if err := validateSendDispatch(sd); err != nil { // keyshared.go
		fail(err)
		return
	}
	if err := b.checkSendReplication(ctx, t.name, sd); err != nil {
		fail(err)
		return
	}
	if f := b.cfg.Testing.RefuseSend; f != nil {
		if err := f(t.name.String()); err != nil {
			fail(err)
			return
		}
	}
	// After a quota or lag-bound refusal every later send of this stream is refused too:
	// storing a later batch first would make the refused one, when the
	// client resends it, look like a duplicate of it (dedup: not above the
	// highest queued sequence), and it would be lost. The client reconnects
	// and resends from the refused batch.
	if err := p.refusedErr(); err != nil {
		fail(err)
		return
	}
	// Backlog quota (quota.go): fail at once or hold, per the namespace.
	if err := t.admitSend(ctx); err != nil {
		p.refuse(err)
		fail(err)
		return
	}
	if err := t.replicationGate(ctx); err != nil {
		if !errors.Is(err, ErrQuotaRefused) {
			// A final refusal (producer_error) is not resent by the
			// client: a later batch may be stored after it.
			p.refuse(err)
		}
		fail(err)
		return
	}
	highest := sd.GetSequenceId() + int64(sd.GetNumMessages()) - 1
	var dup bool
	var d dupResult
	var err error
	if p.bound && !t.ml.bindProducer(p.dedupName(), p.role) {
		// Bound to another role since this producer opened (producer_bind.go).
		fail(errProducerOtherRole(p.name, t.name))
		return
	}
	if t.dedupEnabled() { // the effective deduplication_enabled (policies.go)
		dup, d, err = t.ml.checkDupIdent(ctx, p.dedupName(), p.ident, sd.GetSequenceId(), highest)
		if err == nil && !dup && p.bound && p.role != "" {
			// A new name is tracked from this check: bind it.
			t.ml.bindProducer(p.dedupName(), p.role)
		}
	}
	if err != nil {
		// Refused like a quota refusal: a later batch stored first would
		// make this one's resend look like a stored duplicate.
		p.refuse(err)
		fail(err)
		return
	}
	if dup {
		if d.stored {
			// Answer with where the batch was first stored when that is
			// known (one of the producer's recent batches); else without an ID.
			rc := &clientv1.SendReceipt{SequenceId: sd.GetSequenceId(), Duplicate: true}
			if d.known {
				rc.MessageId = &clientv1.MessageId{LedgerId: d.id.L, EntryId: d.id.E, BatchIndex: d.batchIndex}
			}
			reply(rc)
		} else {
			fail(fmt.Errorf("%w: sequence_id %d of producer %s is still being stored; retry", ErrUnavailable, sd.GetSequenceId(), p.name))
		}
		return
	}
	now := time.Now()
	pub := sd.GetPublishTimeMs()
	if pub == 0 {
		pub = now.UnixMilli()
	}
	md := &clientv1.EntryMetadata{
		ProducerName: p.name, SequenceId: sd.GetSequenceId(), HighestSequenceId: highest,
		PublishTimeMs: pub, NumMessages: sd.GetNumMessages(), Compression: sd.GetCompression(),
		UncompressedSize: sd.GetUncompressedSize(), OriginRegion: b.cfg.Region,
		ReplicateTo: sd.GetReplicateTo(), DisableReplication: sd.GetDisableReplication(),
		BrokerPublishTimeMs: now.UnixMilli(), ProducerIdentity: p.identity,
		DeliverAtMs: sd.GetDeliverAtMs(), BatchKey: sd.GetBatchKey(), SchemaVersion: sd.GetSchemaVersion(),
		ProducerRole: p.role,
		// origin_ledger_id/origin_entry_id stay 0 for local entries: the
		// position is known only after the add; dispatch fills them in.
	}
	md.SchemaVersion = p.entrySchemaVersion() // schema.go
	// Encoded once, by the append loop, with its local origin_seq
	// (replication_seq.go); the metadata limit is checked here.
	if n := proto.Size(md); n > wire.MaxMetadataBytes-16 {
		fail(fmt.Errorf("%w: entry metadata is %d bytes, limit %d", ErrInvalidArgument, n, wire.MaxMetadataBytes-16))
		return
	}
	ns := t.name.NamespaceName()
	nbytes := len(sd.GetPayload())
	nmsgs := int(sd.GetNumMessages())
	req := &appendReq{md: md, payload: sd.GetPayload(), producer: p.dedupName(), firstSeq: sd.GetSequenceId(), lastSeq: highest, local: true,
		ident: p.ident, identFirst: sd.GetSequenceId(), identLast: highest, done: func(ps pos, err error) {
			if err != nil {
				t.ml.unpush(p.dedupName(), highest)
				fail(err)
				return
			}
			t.msgsIn.Add(int64(nmsgs))
			t.bytesIn.Add(int64(nbytes))
			p.msgs.Add(int64(nmsgs))
			b.metrics.in(ns, nmsgs, nbytes, time.Since(now).Seconds())
			reply(&clientv1.SendReceipt{SequenceId: sd.GetSequenceId(), MessageId: &clientv1.MessageId{LedgerId: ps.L, EntryId: ps.E}})
		}}
	release := t.ml.pendIdent(req) // ident_dedup.go
	err = t.ml.enqueue(ctx, req)
	if err != nil {
		release()
		// Not queued (the stream's context ended while the append queue
		// was full, or the ledger failed). Refuse every later send of
		// this stream, as after a quota refusal: enqueue's select may
		// still queue a later batch (room and a cancelled context are
		// both ready), and a later batch stored before this one's resend
		// makes the resend look like a stored duplicate: acknowledged,
		// never stored.
		t.ml.unpush(p.dedupName(), highest)
		p.refuse(err)
		fail(err)
	}
}

func (cs *clientService) Consume(stream clientv1.Meridian_ConsumeServer) error {
	b := cs.b
	ctx := stream.Context()
	req, err := stream.Recv()
	if err != nil {
		return err
	}
	sub := req.GetSubscribe()
	if sub == nil {
		return GRPCError(fmt.Errorf("%w: the first consume request must be subscribe", ErrInvalidArgument))
	}
	name, err := ParseTopic(sub.GetTopic())
	if err != nil {
		return GRPCError(err)
	}
	if sub.GetSubscription() != "" || !sub.GetNonDurable() { // a reader may leave its name to the broker
		if err := ValidateName("subscription", sub.GetSubscription()); err != nil {
			return GRPCError(err)
		}
	}
	if isReplName(sub.GetSubscription()) {
		return GRPCError(fmt.Errorf("%w: subscription %q: names starting with %q are the replicators' cursors", ErrInvalidArgument, sub.GetSubscription(), ReplicatorCursorPrefix))
	}
	if _, ok := clientv1.SubscriptionType_name[int32(sub.GetType())]; !ok {
		return GRPCError(fmt.Errorf("%w: subscription type %d is not EXCLUSIVE, SHARED, FAILOVER or KEY_SHARED", ErrInvalidArgument, sub.GetType()))
	}
	if _, ok := clientv1.InitialPosition_name[int32(sub.GetInitialPosition())]; !ok {
		return GRPCError(fmt.Errorf("%w: initial_position %d is not LATEST or EARLIEST", ErrInvalidArgument, sub.GetInitialPosition()))
	}
	cname := sub.GetConsumerName()
	if cname == "" {
		cname = fmt.Sprintf("consumer-%d", nameCounter.Add(1))
	} else if len(cname) > 256 {
		return GRPCError(fmt.Errorf("%w: consumer_name is %d bytes, limit 256", ErrInvalidArgument, len(cname)))
	}
	if err := b.checkAutoTopicCreation(ctx, name); err != nil { // limits.go
		return GRPCError(err)
	}
	t, err := b.getTopic(ctx, name, true)
	if err != nil {
		return GRPCError(err)
	}
	schemaVer, err := b.consumerSchema(ctx, t, sub.GetSchema()) // schema.go
	if err != nil {
		return GRPCError(err)
	}
	s, created, err := t.subscribeStart(ctx, sub) // seek_reader.go: readers, start positions
	if err != nil {
		return GRPCError(err)
	}
	if s.nonDurable {
		defer t.removeReader(s)
	}
	connKey := peerAddr(ctx)
	hold := &deliveryHold{own: newByteBudget(b.cfg.MaxPendingDeliveryBytesPerConsumer), conn: b.deliveryConns.get(connKey), broker: b.deliveryBytes}
	defer b.deliveryConns.put(connKey)
	c := &consumer{name: cname, priority: sub.GetPriority(), addr: connKey,
		out: make(chan *clientv1.ConsumeResponse, b.cfg.MaxPermitsPerConsumer+64), done: make(chan struct{}),
		ks: sub.GetKeyShared(), hold: hold}
	if err := s.addConsumer(c, sub.GetType(), t.maxConsumers()); err != nil {
		hold.close()
		return GRPCError(err)
	}
	defer func() {
		s.removeConsumer(c)
		hold.close() // what is still queued on c.out is dropped with the stream
		c.closeDone()
	}()
	if err := stream.Send(&clientv1.ConsumeResponse{Kind: &clientv1.ConsumeResponse_Subscribed{Subscribed: &clientv1.Subscribed{ConsumerName: cname, Created: created, SchemaVersion: schemaVer}}}); err != nil {
		return err
	}
	reqs := make(chan *clientv1.ConsumeRequest)
	recvErr := make(chan error, 1)
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reqs <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	// control answers a request directly: this goroutine is the only one
	// sending on the stream, and it must never wait on c.out, which only it
	// drains.
	control := func(r *clientv1.ConsumeResponse) error { return stream.Send(r) }
	for {
		select {
		case r := <-c.out:
			err := stream.Send(r)
			hold.release(deliverySize(r))
			if err != nil {
				return err
			}
		case r := <-reqs:
			switch k := r.Kind.(type) {
			case *clientv1.ConsumeRequest_Flow:
				s.flow(c, k.Flow.GetPermits())
			case *clientv1.ConsumeRequest_Ack:
				err := s.acknowledgeAck(ctx, k.Ack)
				if k.Ack.GetRequestId() != 0 {
					if e := control(&clientv1.ConsumeResponse{Kind: &clientv1.ConsumeResponse_AckResponse{AckResponse: &clientv1.AckResponse{RequestId: k.Ack.GetRequestId(), Error: ToError(err)}}}); e != nil {
						return e
					}
				} else if err != nil {
					if e := control(&clientv1.ConsumeResponse{Kind: &clientv1.ConsumeResponse_Error{Error: ToError(err)}}); e != nil {
						return e
					}
				}
			case *clientv1.ConsumeRequest_Seek:
				// seek.go: resolve, move the cursor, disconnect the others.
				sctx, cancel := seekContext(ctx)
				err := t.seek(sctx, s, "seek.position", k.Seek.GetPosition(), c)
				cancel()
				if err == nil {
					for _, r := range s.dropQueued(c) {
						if e := control(r); e != nil {
							return e
						}
					}
				}
				if e := control(&clientv1.ConsumeResponse{Kind: &clientv1.ConsumeResponse_SeekResponse{SeekResponse: &clientv1.SeekResponse{RequestId: k.Seek.GetRequestId(), Error: ToError(err)}}}); e != nil {
					return e
				}
			case *clientv1.ConsumeRequest_Redeliver:
				s.redeliverUnacked(c, k.Redeliver.GetMessageIds())
			case *clientv1.ConsumeRequest_Unsubscribe:
				s.mu.Lock()
				others := len(s.consumers) - 1
				s.mu.Unlock()
				if others > 0 {
					if e := control(&clientv1.ConsumeResponse{Kind: &clientv1.ConsumeResponse_Error{Error: ToError(fmt.Errorf("%w: subscription %s has %d other consumers", ErrNotAllowed, s.name, others))}}); e != nil {
						return e
					}
					continue
				}
				if err := t.deleteSub(ctx, s.name, true); err != nil {
					if e := control(&clientv1.ConsumeResponse{Kind: &clientv1.ConsumeResponse_Error{Error: ToError(err)}}); e != nil {
						return e
					}
					continue
				}
				return stream.Send(&clientv1.ConsumeResponse{Kind: &clientv1.ConsumeResponse_Unsubscribed{Unsubscribed: &clientv1.Unsubscribed{}}})
			default:
				if e := control(&clientv1.ConsumeResponse{Kind: &clientv1.ConsumeResponse_Error{Error: ToError(fmt.Errorf("%w: subscribe may only be sent first", ErrInvalidArgument))}}); e != nil {
					return e
				}
			}
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-c.done:
			return GRPCError(&notOwnedError{})
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
