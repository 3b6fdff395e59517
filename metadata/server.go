package metadata

import (
	"context"
	"net"
	"time"

	metadatav1 "github.com/meridianmq/meridian/api/metadata/v1"
	"github.com/meridianmq/meridian/internal/netguard"
	"github.com/meridianmq/meridian/security"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
)

// newGRPCServer builds the node's gRPC server with the metadata service
// and server reflection.
func newGRPCServer(n *Node) *grpc.Server {
	opts := append(n.cfg.GRPCServerOptions(n.cfg.MaxTxnBytes+(1<<20), netguard.DefaultKeepalive()), grpc.MaxSendMsgSize(64<<20))
	s := grpc.NewServer(append(opts, n.sec.ServerOptions(Authorizer(n.sec))...)...)
	metadatav1.RegisterMetadataServer(s, &service{node: n})
	reflection.Register(s)
	return s
}

// clientOf names the caller that max_sessions_per_client and
// max_watches_per_client count: "role:<role>" for an authenticated caller
// (security.IdentityFrom, set by the node's interceptors), else "ip:<remote
// IP>". Every caller authenticated as one role (all brokers of a region are
// "broker.<region>") shares its limits.
func clientOf(ctx context.Context) string {
	if id := security.IdentityFrom(ctx); !id.Anonymous() {
		return "role:" + id.Role
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		host, _, err := net.SplitHostPort(p.Addr.String())
		if err != nil {
			host = p.Addr.String()
		}
		return "ip:" + host
	}
	return "unknown"
}

// service implements metadatav1.MetadataServer over the node's shard stores.
type service struct {
	metadatav1.UnimplementedMetadataServer
	node *Node
}

func (s *service) store(name string) (*shardStore, error) {
	st, err := s.node.shard(name)
	if err != nil {
		return nil, ToStatus(err)
	}
	return st, nil
}

// Get implements metadatav1.MetadataServer.
func (s *service) Get(ctx context.Context, req *metadatav1.GetRequest) (*metadatav1.GetResponse, error) {
	st, err := s.store(req.Shard)
	if err != nil {
		return nil, err
	}
	kv, err := st.Get(ctx, req.Key, ReadOptions{Stale: req.Stale})
	if err != nil {
		return nil, ToStatus(err)
	}
	return &metadatav1.GetResponse{Kv: kvToPB(kv)}, nil
}

// Put implements metadatav1.MetadataServer.
func (s *service) Put(ctx context.Context, req *metadatav1.PutRequest) (*metadatav1.PutResponse, error) {
	st, err := s.store(req.Shard)
	if err != nil {
		return nil, err
	}
	kv, err := st.Put(ctx, req.Key, req.Value, req.ExpectedVersion, SessionID(req.Session))
	if err != nil {
		return nil, ToStatus(err)
	}
	return &metadatav1.PutResponse{Kv: kvToPB(kv)}, nil
}

// Delete implements metadatav1.MetadataServer.
func (s *service) Delete(ctx context.Context, req *metadatav1.DeleteRequest) (*metadatav1.DeleteResponse, error) {
	st, err := s.store(req.Shard)
	if err != nil {
		return nil, err
	}
	if err := st.Delete(ctx, req.Key, req.ExpectedVersion); err != nil {
		return nil, ToStatus(err)
	}
	return &metadatav1.DeleteResponse{}, nil
}

// List implements metadatav1.MetadataServer.
func (s *service) List(ctx context.Context, req *metadatav1.ListRequest) (*metadatav1.ListResponse, error) {
	st, err := s.store(req.Shard)
	if err != nil {
		return nil, err
	}
	res, err := st.List(ctx, req.Prefix, Page{After: req.After, Limit: int(req.Limit)}, ReadOptions{Stale: req.Stale})
	if err != nil {
		return nil, ToStatus(err)
	}
	out := &metadatav1.ListResponse{More: res.More, Revision: res.Revision}
	for _, kv := range res.KVs {
		out.Kvs = append(out.Kvs, kvToPB(kv))
	}
	return out, nil
}

// Txn implements metadatav1.MetadataServer.
func (s *service) Txn(ctx context.Context, req *metadatav1.TxnRequest) (*metadatav1.TxnResponse, error) {
	st, err := s.store(req.Shard)
	if err != nil {
		return nil, err
	}
	ops := make([]Op, len(req.Ops))
	for i, op := range req.Ops {
		ops[i] = Op{Type: OpType(op.Type), Key: op.Key, Value: op.Value, ExpectedVersion: op.ExpectedVersion, Session: SessionID(op.Session)}
	}
	kvs, err := st.Txn(ctx, ops)
	if err != nil {
		return nil, ToStatus(err)
	}
	out := &metadatav1.TxnResponse{}
	for _, kv := range kvs {
		out.Kvs = append(out.Kvs, kvToPB(kv))
	}
	return out, nil
}

// watchBatch caps the events of one WatchResponse.
const watchBatch = 128

// Watch implements metadatav1.MetadataServer: it streams the node's local
// watch, batching the events that are ready.
func (s *service) Watch(req *metadatav1.WatchRequest, stream grpc.ServerStreamingServer[metadatav1.WatchResponse]) error {
	st, err := s.store(req.Shard)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	evc, errc := st.watch(ctx, req.Prefix, req.AfterRevision, clientOf(ctx))
	for ev := range evc {
		resp := &metadatav1.WatchResponse{Events: []*metadatav1.Event{eventToPB(ev)}}
	batch:
		for len(resp.Events) < watchBatch {
			select {
			case ev, ok := <-evc:
				if !ok {
					break batch
				}
				resp.Events = append(resp.Events, eventToPB(ev))
			default:
				break batch
			}
		}
		if err := stream.Send(resp); err != nil {
			// Stop and drain the watch so its goroutine ends.
			cancel()
			for range evc {
			}
			<-errc
			return err
		}
	}
	if err := <-errc; err != nil {
		return ToStatus(err)
	}
	return nil
}

// CreateSession implements metadatav1.MetadataServer.
func (s *service) CreateSession(ctx context.Context, req *metadatav1.CreateSessionRequest) (*metadatav1.CreateSessionResponse, error) {
	st, err := s.store(req.Shard)
	if err != nil {
		return nil, err
	}
	id, err := st.createSession(ctx, time.Duration(req.TtlMs)*time.Millisecond, clientOf(ctx))
	if err != nil {
		return nil, ToStatus(err)
	}
	return &metadatav1.CreateSessionResponse{Session: uint64(id)}, nil
}

// KeepAlive implements metadatav1.MetadataServer.
func (s *service) KeepAlive(ctx context.Context, req *metadatav1.KeepAliveRequest) (*metadatav1.KeepAliveResponse, error) {
	st, err := s.store(req.Shard)
	if err != nil {
		return nil, err
	}
	if err := st.KeepAlive(ctx, SessionID(req.Session)); err != nil {
		return nil, ToStatus(err)
	}
	return &metadatav1.KeepAliveResponse{}, nil
}

// CloseSession implements metadatav1.MetadataServer.
func (s *service) CloseSession(ctx context.Context, req *metadatav1.CloseSessionRequest) (*metadatav1.CloseSessionResponse, error) {
	st, err := s.store(req.Shard)
	if err != nil {
		return nil, err
	}
	if err := st.CloseSession(ctx, SessionID(req.Session)); err != nil {
		return nil, ToStatus(err)
	}
	return &metadatav1.CloseSessionResponse{}, nil
}

func kvToPB(kv KV) *metadatav1.KeyValue {
	return &metadatav1.KeyValue{Key: kv.Key, Value: kv.Value, Version: kv.Version, CreateRevision: kv.CreateRevision,
		ModRevision: kv.ModRevision, Session: uint64(kv.Session)}
}

// kvFromPB converts a KeyValue; an empty value comes back as an empty,
// non-nil slice, as the in-process store returns it.
func kvFromPB(p *metadatav1.KeyValue) KV {
	if p == nil {
		return KV{}
	}
	v := p.Value
	if v == nil {
		v = []byte{}
	}
	return KV{Key: p.Key, Value: v, Version: p.Version, CreateRevision: p.CreateRevision,
		ModRevision: p.ModRevision, Session: SessionID(p.Session)}
}

func eventToPB(ev Event) *metadatav1.Event {
	return &metadatav1.Event{Type: metadatav1.EventType(ev.Type), Revision: ev.Revision, Kv: kvToPB(ev.KV)}
}

// eventFromPB converts an Event; deletes carry a nil Value.
func eventFromPB(p *metadatav1.Event) Event {
	ev := Event{Type: EventType(p.Type), Revision: p.Revision, KV: kvFromPB(p.Kv)}
	if ev.Type == EventDelete {
		ev.KV.Value = nil
	}
	return ev
}
