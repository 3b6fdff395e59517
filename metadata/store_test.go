package metadata_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/metadata/metadatatest"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestSingleNodePutGet(t *testing.T) {
	s := metadatatest.Start(t)
	ctx := ctxT(t)
	kv, err := s.Put(ctx, "a", []byte("1"), metadata.MustNotExist, 0)
	if err != nil {
		t.Fatal(err)
	}
	if kv.Version != 1 {
		t.Fatalf("version %d", kv.Version)
	}
	got, err := s.Get(ctx, "a", metadata.ReadOptions{})
	if err != nil || string(got.Value) != "1" {
		t.Fatalf("get: %v %v", got, err)
	}
	if _, err := s.Put(ctx, "a", []byte("2"), metadata.MustNotExist, 0); !errors.Is(err, metadata.ErrVersionMismatch) {
		t.Fatalf("want mismatch, got %v", err)
	}
}
