package metadata_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/metadata/metadatatest"
)

// The model: a map of versioned registers, checked one key at a time.
type linInput struct {
	Op       string // get, put (any version), cas (expected version)
	Key      string
	Value    string
	Expected int64
}

type linOutput struct {
	Unknown bool // ErrUnknownOutcome: may or may not have applied
	Found   bool
	OK      bool // cas applied (false: version mismatch)
	Value   string
	Version int64
}

type linState struct {
	Value   string
	Version int64 // 0 = absent
}

var versionedKV = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := op.Input.(linInput).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		var out [][]porcupine.Operation
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() interface{} { return linState{} },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		st, in, out := state.(linState), input.(linInput), output.(linOutput)
		next := linState{Value: in.Value, Version: st.Version + 1}
		switch in.Op {
		case "get":
			if out.Found != (st.Version > 0) {
				return false, st
			}
			return !out.Found || (out.Value == st.Value && out.Version == st.Version), st
		case "put":
			if out.Unknown {
				// Its return time is "never": linearized last, an unknown
				// write is indistinguishable from one that did not happen.
				return true, next
			}
			return out.Version == next.Version, next
		case "cas":
			holds := (in.Expected == metadata.MustNotExist && st.Version == 0) || (in.Expected > 0 && st.Version == in.Expected)
			switch {
			case out.Unknown && holds:
				return true, next
			case out.Unknown:
				return true, st
			case out.OK:
				return holds && out.Version == next.Version, next
			default:
				return !holds, st
			}
		}
		return false, st
	},
	DescribeOperation: func(input, output interface{}) string {
		in, out := input.(linInput), output.(linOutput)
		return fmt.Sprintf("%s(%s,%q,%d) -> %+v", in.Op, in.Key, in.Value, in.Expected, out)
	},
}

// TestLinearizability records a concurrent history of gets, puts and
// compare-and-sets on a three-node cluster while the leader is repeatedly
// stopped and restarted, and checks it with porcupine.
func TestLinearizability(t *testing.T) {
	t.Run("local", func(t *testing.T) { runLinearizability(t, false) })
	t.Run("grpc", func(t *testing.T) { runLinearizability(t, true) })
}

// runLinearizability uses either the nodes' in-process stores (a random
// running node per operation) or one gRPC client per worker.
func runLinearizability(t *testing.T, viaGRPC bool) {
	c := metadatatest.StartClusterWith(t, 3, metadatatest.Options{GRPC: viaGRPC})
	const workers = 5
	keys := []string{"lin/x", "lin/y"}
	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }

	var mu sync.Mutex
	var history []porcupine.Operation
	unknown, unavailable := 0, 0
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			lastVersion := map[string]int64{}
			var client metadata.Store
			if viaGRPC {
				eps := c.Endpoints()
				eps = append(eps[w%3:], eps[:w%3]...)
				client = newClient(t, eps, metadata.GlobalShard)
			}
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				st := client
				if st == nil {
					nd := c.Node(rng.IntN(3))
					if nd == nil {
						continue
					}
					var err error
					if st, err = nd.Store(metadata.GlobalShard); err != nil {
						continue
					}
				}
				var err error
				key := keys[rng.IntN(len(keys))]
				in := linInput{Key: key, Value: fmt.Sprintf("w%d-%d", w, seq)}
				var out linOutput
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				call := now()
				switch r := rng.IntN(10); {
				case r < 4:
					in.Op = "get"
					var kv metadata.KV
					kv, err = st.Get(ctx, key, metadata.ReadOptions{})
					if errors.Is(err, metadata.ErrNotFound) {
						err = nil
					} else if err == nil {
						out = linOutput{Found: true, Value: string(kv.Value), Version: kv.Version}
						lastVersion[key] = kv.Version
					}
				case r < 6:
					in.Op = "put"
					var kv metadata.KV
					kv, err = st.Put(ctx, key, []byte(in.Value), metadata.AnyVersion, 0)
					out.Version = kv.Version
				default:
					in.Op = "cas"
					in.Expected = lastVersion[key]
					if in.Expected == 0 {
						in.Expected = metadata.MustNotExist
					}
					var kv metadata.KV
					kv, err = st.Put(ctx, key, []byte(in.Value), in.Expected, 0)
					if err == nil {
						out = linOutput{OK: true, Version: kv.Version}
						lastVersion[key] = kv.Version
					} else if errors.Is(err, metadata.ErrVersionMismatch) {
						err = nil
						lastVersion[key] = 0
					}
				}
				ret := now()
				cancel()
				op := porcupine.Operation{ClientId: w, Input: in, Call: call, Output: out, Return: ret}
				switch {
				case err == nil:
				case errors.Is(err, metadata.ErrUnknownOutcome) && in.Op != "get":
					op.Output = linOutput{Unknown: true}
					op.Return = -1 // fixed below: after every other operation
					mu.Lock()
					unknown++
					mu.Unlock()
				case errors.Is(err, metadata.ErrUnavailable), errors.Is(err, metadata.ErrUnknownOutcome):
					// Not applied (or a read): leaves no trace in the history.
					mu.Lock()
					unavailable++
					mu.Unlock()
					continue
				default:
					t.Errorf("%s: unexpected error %v", in.Op, err)
					continue
				}
				mu.Lock()
				history = append(history, op)
				mu.Unlock()
			}
		}()
	}

	rounds := 3
	if os.Getenv("MERIDIAN_LONG_TESTS") != "" {
		rounds = 10
	}
	time.Sleep(500 * time.Millisecond)
	for r := range rounds {
		leader := c.Leader(metadata.GlobalShard)
		c.StopNode(leader)
		time.Sleep(700 * time.Millisecond)
		c.StartNode(leader)
		time.Sleep(700 * time.Millisecond)
		t.Logf("round %d: restarted leader node %d", r+1, leader+1)
	}
	close(stop)
	wg.Wait()

	end := now() + int64(time.Hour)
	for i := range history {
		if history[i].Return == -1 {
			history[i].Return = end
		}
	}
	t.Logf("history: %d operations, %d with unknown outcome, %d unavailable (dropped)", len(history), unknown, unavailable)
	if len(history) < 50 {
		t.Fatalf("only %d operations recorded", len(history))
	}
	res, info := porcupine.CheckOperationsVerbose(versionedKV, history, 60*time.Second)
	switch res {
	case porcupine.Ok:
	case porcupine.Unknown:
		t.Logf("porcupine timed out; history not fully checked")
	default:
		path := filepath.Join(t.TempDir(), "linearizability.html")
		if err := porcupine.VisualizePath(versionedKV, info, path); err == nil {
			t.Logf("visualization: %s", path)
		}
		t.Fatalf("history is not linearizable")
	}
}

// TestLinearizabilityModelRejects shows the checker fails on a stale read
// and on a lost acknowledged write, so the check above can fail.
func TestLinearizabilityModelRejects(t *testing.T) {
	op := func(c, r int64, in linInput, out linOutput) porcupine.Operation {
		return porcupine.Operation{Input: in, Call: c, Output: out, Return: r}
	}
	stale := []porcupine.Operation{
		op(0, 10, linInput{Op: "put", Key: "k", Value: "a"}, linOutput{Version: 1}),
		op(20, 30, linInput{Op: "put", Key: "k", Value: "b"}, linOutput{Version: 2}),
		op(40, 50, linInput{Op: "get", Key: "k"}, linOutput{Found: true, Value: "a", Version: 1}),
	}
	if porcupine.CheckOperations(versionedKV, stale) {
		t.Fatal("stale read accepted")
	}
	lost := []porcupine.Operation{
		op(0, 10, linInput{Op: "cas", Key: "k", Value: "a", Expected: -1}, linOutput{OK: true, Version: 1}),
		op(20, 30, linInput{Op: "get", Key: "k"}, linOutput{}),
	}
	if porcupine.CheckOperations(versionedKV, lost) {
		t.Fatal("lost write accepted")
	}
	maybe := []porcupine.Operation{
		op(0, 1<<40, linInput{Op: "put", Key: "k", Value: "a"}, linOutput{Unknown: true}),
		op(20, 30, linInput{Op: "get", Key: "k"}, linOutput{}),
		op(40, 50, linInput{Op: "get", Key: "k"}, linOutput{Found: true, Value: "a", Version: 1}),
	}
	if !porcupine.CheckOperations(versionedKV, maybe) {
		t.Fatal("unknown-outcome write seen late rejected")
	}
}
