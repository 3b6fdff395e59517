package broker

import (
	"context"

	"github.com/meridianmq/meridian/bookie/ledger"
)

// NewLedgerStore adapts a ledger client to the broker's LedgerStore.
func NewLedgerStore(c *ledger.Client) LedgerStore { return ledgerStore{c} }

type ledgerStore struct{ c *ledger.Client }

func (s ledgerStore) Create(ctx context.Context, o LedgerOptions) (LedgerWriter, error) {
	w, err := s.c.Create(ctx, ledger.CreateOptions{Ensemble: o.Ensemble, WriteQuorum: o.WriteQuorum, AckQuorum: o.AckQuorum, Properties: o.Properties})
	if err != nil {
		return nil, err
	}
	return w, nil
}

func (s ledgerStore) Open(ctx context.Context, id int64) (LedgerReader, error) {
	r, err := s.c.Open(ctx, id)
	if err != nil {
		return nil, err
	}
	return ledgerReader{r}, nil
}

func (s ledgerStore) OpenRecover(ctx context.Context, id int64) (LedgerReader, error) {
	r, err := s.c.OpenRecover(ctx, id)
	if err != nil {
		return nil, err
	}
	return ledgerReader{r}, nil
}

func (s ledgerStore) Delete(ctx context.Context, id int64) error { return s.c.Delete(ctx, id) }

type ledgerReader struct{ *ledger.Reader }

func (r ledgerReader) Read(ctx context.Context, first, last int64) ([]LedgerEntry, error) {
	ents, err := r.Reader.Read(ctx, first, last)
	out := make([]LedgerEntry, len(ents))
	for i, e := range ents {
		out[i] = LedgerEntry{LedgerID: e.LedgerID, EntryID: e.EntryID, Data: e.Data}
	}
	return out, err
}
