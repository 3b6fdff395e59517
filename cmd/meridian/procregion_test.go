package main

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Helpers for the process-level tests: configs derived from the samples
// for a region of separate meta, bookie and broker processes.

// startMetaProc starts a one-node metadata process with its data under dir,
// waits until it is ready and returns its gRPC address.
func startMetaProc(t *testing.T, dir string) string {
	t.Helper()
	metaRaft, metaGRPC, metaHTTP := cliFreeAddr(t), cliFreeAddr(t), cliFreeAddr(t)
	metaCfg := deriveSample(t, "meta.yaml", dir, "meta.yaml", func(m yamlMap) {
		m["raft_address"], m["grpc_address"], m["http_address"] = metaRaft, metaGRPC, metaHTTP
		m["data_dir"] = filepath.Join(dir, "meta")
		for _, s := range m["shards"].([]any) {
			s.(map[string]any)["members"] = map[int]string{1: metaRaft}
		}
	})
	meta := startProc(t, "meta", "meta", "--config", metaCfg)
	waitHTTP(t, meta, "http://"+metaHTTP+"/readyz", 90*time.Second)
	return metaGRPC
}

// bookieProcConfig writes bookie id's config, derived from bookie.yaml, to
// dir/id.yaml: its addresses and rack, journal and ledger directories under
// dir/id and the metadata endpoint metaGRPC. edit, if not nil, changes the
// rest. It returns the config's path.
func bookieProcConfig(t *testing.T, dir, id, grpcAddr, httpAddr, rack, metaGRPC string, edit func(m yamlMap)) string {
	t.Helper()
	return deriveSample(t, "bookie.yaml", dir, id+".yaml", func(m yamlMap) {
		m["id"], m["listen_addr"], m["http_addr"] = id, grpcAddr, httpAddr
		m["rack"] = rack
		m["journal_dir"] = filepath.Join(dir, id, "journal")
		m["ledger_dir"] = filepath.Join(dir, id, "ledgers")
		m.sub("metadata")["endpoints"] = []string{metaGRPC}
		if edit != nil {
			edit(m)
		}
	})
}

// setGossip makes bookie config m gossip on bind, seeded by seed unless
// bind is the seed itself.
func setGossip(m yamlMap, bind, seed string) {
	g := m.sub("gossip")
	g["bind_addr"] = bind
	if bind != seed {
		g["seeds"] = []string{seed}
	}
}

// brokerProcConfig writes broker id's config, derived from broker.yaml, to
// dir/id.yaml: its id and addresses and the metadata endpoint metaGRPC.
// edit, if not nil, changes the rest of the broker section. It returns the
// config's path.
func brokerProcConfig(t *testing.T, dir, id, grpcAddr, httpAddr, metaGRPC string, edit func(b yamlMap)) string {
	t.Helper()
	return deriveSample(t, "broker.yaml", dir, id+".yaml", func(m yamlMap) {
		b := m.sub("broker")
		b["broker_id"], b["grpc_address"], b["http_address"] = id, grpcAddr, httpAddr
		m.sub("metadata")["endpoints"] = []string{metaGRPC}
		if edit != nil {
			edit(b)
		}
	})
}

// pause stops p with SIGSTOP: its connections stay open and nothing
// answers. The returned resume sends SIGCONT once; it also runs at the
// end of the test, so no stopped process is left behind.
func (p *proc) pause(t *testing.T) (resume func()) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume = func() {
		if !resumed {
			resumed = true
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	return resume
}
