package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/security"
	"github.com/meridianmq/meridian/topology"
	"google.golang.org/grpc"
)

// ScrubBookie asks a registered bookie to scrub (verify the CRC of every
// entry it stores, mark damaged ledgers under-replicated) and returns what
// it found. The bookie is found in the regional registry.
func (a *adminService) ScrubBookie(ctx context.Context, r *clientv1.ScrubBookieRequest) (*clientv1.ScrubBookieResponse, error) {
	id := r.GetBookieId()
	if id == "" || len(id) > 256 {
		return nil, GRPCError(fmt.Errorf("%w: bookie_id must be 1 to 256 bytes, got %d", ErrInvalidArgument, len(id)))
	}
	kv, err := a.b.cfg.Regional.Get(ctx, topology.BookieRegistryPrefix+id, metadata.ReadOptions{})
	if errors.Is(err, metadata.ErrNotFound) {
		return nil, GRPCError(fmt.Errorf("%w: bookie %s is not registered (down or unknown)", ErrNotFound, id))
	}
	if err != nil {
		return nil, GRPCError(fmt.Errorf("%w: read registry: %v", ErrUnavailable, err))
	}
	var bi topology.BookieInfo
	if err := json.Unmarshal(kv.Value, &bi); err != nil || bi.Address == "" {
		return nil, GRPCError(fmt.Errorf("%w: bookie %s has a bad registry entry", ErrUnavailable, id))
	}
	opts := append(a.b.sec.DialOptions(security.ServerNameOf(bi.Address)),
		bookie.WithExpectedIdentity(func() (string, string) { return bi.ID, bi.InstanceID })...)
	cc, err := grpc.NewClient(bi.Address, opts...)
	if err != nil {
		return nil, GRPCError(fmt.Errorf("%w: dial bookie %s at %s: %v", ErrUnavailable, id, bi.Address, err))
	}
	defer cc.Close()
	res, err := bookiev1.NewBookieClient(cc).Scrub(ctx, &bookiev1.ScrubRequest{})
	if err != nil {
		return nil, GRPCError(fmt.Errorf("%w: scrub bookie %s: %v", ErrUnavailable, id, bookie.FromStatus(err)))
	}
	a.b.log.Info("bookie scrubbed on demand", "bookie", id, "entries_checked", res.GetEntriesChecked(),
		"corrupt_entries", res.GetCorruptEntries(), "ledgers_marked", len(res.GetLedgersMarked()))
	resp := &clientv1.ScrubBookieResponse{
		BookieId: id, EntriesChecked: res.GetEntriesChecked(), BytesChecked: res.GetBytesChecked(),
		CorruptEntries: res.GetCorruptEntries(), RangesTruncated: res.GetRangesTruncated(),
		DamagedLedgers: res.GetLedgers(), LedgersMarked: res.GetLedgersMarked(), TookMs: res.GetTookMs(),
	}
	for _, c := range res.GetRanges() {
		resp.CorruptRanges = append(resp.CorruptRanges, &clientv1.BookieCorruptRange{LedgerId: c.GetLedgerId(), FirstEntry: c.GetFirstEntry(), LastEntry: c.GetLastEntry()})
	}
	for _, d := range res.GetDamagedJournal() {
		resp.DamagedJournal = append(resp.DamagedJournal, &clientv1.BookieDamagedJournalRange{File: d.GetFile(), FromOffset: d.GetFromOffset(), ToOffset: d.GetToOffset(), Ledgers: d.GetLedgers()})
	}
	return resp, nil
}
