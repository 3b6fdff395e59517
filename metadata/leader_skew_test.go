package metadata_test

import (
	"errors"
	"testing"
	"time"

	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/metadata/metadatatest"
)

// A metadata leader whose wall clock jumps while it leads (the chaos
// suite's clock fault, POST /debug/clock):
//   - back by 30 s: a session left alone still expires on time (before the
//     fix the session clock stood still for 30 s, so the sessions of dead
//     brokers and bookies outlived them and their topics stayed stuck);
//   - ahead by 30 s: a session kept alive does not expire (before the fix
//     every session of the shard expired at the first tick).
func TestLeaderClockJump(t *testing.T) {
	var clock *metadata.SkewClock
	c := metadatatest.StartClusterWith(t, 1, metadatatest.Options{Configure: func(_ int, cfg *metadata.NodeConfig) {
		cfg.FaultInjection = true
		clock = metadata.NewSkewClock(nil)
		cfg.Expert.Clock = clock
	}})
	ctx := ctxT(t)
	st := c.Store(0, metadata.GlobalShard)
	// A first session so that the session clock exists and the leader has
	// anchored to it.
	keep := must[metadata.SessionID](t)(st.CreateSession(ctx, 3*time.Second))
	must[metadata.KV](t)(st.Put(ctx, "eph/keep", []byte("x"), metadata.MustNotExist, keep))
	time.Sleep(time.Second)

	if err := clock.SetSkew(-30 * time.Second); err != nil {
		t.Fatal(err)
	}
	short := must[metadata.SessionID](t)(st.CreateSession(ctx, time.Second))
	must[metadata.KV](t)(st.Put(ctx, "eph/short", []byte("x"), metadata.MustNotExist, short))
	t0 := time.Now()
	for {
		if err := st.KeepAlive(ctx, keep); err != nil {
			t.Fatalf("kept session after the clock went back: %v", err)
		}
		_, err := st.Get(ctx, "eph/short", metadata.ReadOptions{})
		if errors.Is(err, metadata.ErrNotFound) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Since(t0) > 15*time.Second {
			t.Fatal("a 1 s session left alone did not expire within 15 s of the leader's clock going back 30 s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("1 s session expired after %v with the leader's clock 30 s back", time.Since(t0).Round(10*time.Millisecond))

	if err := clock.SetSkew(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	for t0 := time.Now(); time.Since(t0) < 5*time.Second; time.Sleep(300 * time.Millisecond) {
		if err := st.KeepAlive(ctx, keep); err != nil {
			t.Fatalf("kept session after the clock jumped 30 s ahead: %v", err)
		}
	}
	if _, err := st.Get(ctx, "eph/keep", metadata.ReadOptions{}); err != nil {
		t.Fatalf("ephemeral key of the kept session: %v", err)
	}
}
