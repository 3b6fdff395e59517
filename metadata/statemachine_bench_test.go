package metadata

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkStateMachinePutNewKey measures a put of a new key at a random
// place in the key index of a shard holding keys keys (the index is what
// List scans in order; an insert into a sorted slice moves half of it).
//
//	go test -run '^$' -bench StateMachinePutNewKey ./metadata/
func BenchmarkStateMachinePutNewKey(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			st := smState{NextSession: 1, KVs: make(map[string]*KV, n), Sessions: map[uint64]*smSession{}}
			for i := range n {
				k := fmt.Sprintf("k/%08d", 2*i)
				st.KVs[k] = &KV{Key: k, Value: []byte("v"), Version: 1}
			}
			var snap bytes.Buffer
			if err := json.NewEncoder(&snap).Encode(&st); err != nil {
				b.Fatal(err)
			}
			s := newStateMachine(1, 1000, 1<<20, nil)
			if err := s.RecoverFromSnapshot(&snap, nil, nil); err != nil {
				b.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			keys := make([]string, b.N)
			for i := range keys {
				keys[i] = fmt.Sprintf("k/%08d.%d", rng.IntN(2*n), i)
			}
			op := []cmdOp{{Type: OpPut, Value: []byte("v")}}
			b.ResetTimer()
			for i := range b.N {
				op[0].Key = keys[i]
				if code, res := s.applyTxn(op, 0, 0); code != codeOK {
					b.Fatalf("put: %d %s", code, res.Msg)
				}
			}
		})
	}
}
