package metadata_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meridianmq/meridian/metadata"
)

func TestSampleConfigsLoad(t *testing.T) {
	files, _ := filepath.Glob("../deploy/config/meta*.yaml")
	if len(files) < 4 {
		t.Fatalf("sample configs: %v", files)
	}
	for _, f := range files {
		cfg, err := metadata.LoadNodeConfig(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if cfg.Shards[0].Name != metadata.GlobalShard {
			t.Errorf("%s: first shard %q", f, cfg.Shards[0].Name)
		}
	}
}

func TestBadConfigNamesField(t *testing.T) {
	cases := map[string]string{
		"node_id: 0\nraft_address: 127.0.0.1:1\ndata_dir: /x\nshards: [{name: global, shard_id: 1, members: {0: 127.0.0.1:1}}]\n":                                               "node_id",
		"node_id: 1\nraft_address: nope\ndata_dir: /x\nshards: [{name: global, shard_id: 1, members: {1: nope}}]\n":                                                             "raft_address",
		"node_id: 1\nraft_address: 127.0.0.1:1\nshards: [{name: global, shard_id: 1, members: {1: 127.0.0.1:1}}]\n":                                                             "data_dir",
		"node_id: 1\nraft_address: 127.0.0.1:1\ndata_dir: /x\nshards: [{name: global, shard_id: 1, members: {2: 127.0.0.1:2}}]\n":                                               "shards[0].members must include node_id 1",
		"node_id: 1\nraft_address: 127.0.0.1:1\ndata_dir: /x\nshards: [{name: g, shard_id: 1, members: {1: 127.0.0.1:1}}, {name: g, shard_id: 2, members: {1: 127.0.0.1:1}}]\n": "shards[1].name",
		"node_id: 1\nraft_address: 127.0.0.1:1\ndata_dir: /x\nshards: [{name: g, shard_id: 1, members: {1: 127.0.0.1:1}}]\nmax_value_bytes: 0\n":                                "max_value_bytes",
		"node_id: 1\nraft_address: 127.0.0.1:1\ndata_dir: /x\nshards: [{name: g, shard_id: 1, members: {1: 127.0.0.1:1}}]\nbogus: 1\n":                                          "bogus",
		"node_id: 1\nraft_address: 127.0.0.1:1\ndata_dir: /x\nshards: [{name: g, shard_id: 1, members: {1: 127.0.0.1:1}}]\nrtt: fast\n":                                         "fast",
		"node_id: 1\nraft_address: 127.0.0.1:1\ndata_dir: /x\nshards: [{name: g, shard_id: 1, members: {1: 127.0.0.1:1}}]\nraft_dial_rewrite: {127.0.0.1:2: nope}\n":            "raft_dial_rewrite[\"127.0.0.1:2\"]",
		"node_id: 1\nraft_address: 127.0.0.1:1\ndata_dir: /x\nshards: [{name: g, shard_id: 1, members: {1: 127.0.0.1:1}}]\nraft_dial_rewrite: {nope: 127.0.0.1:3}\n":            "raft_dial_rewrite key",
		"node_id: 1\nraft_address: 127.0.0.1:1\ndata_dir: /x\nshards: [{name: g, shard_id: 1, members: {1: 127.0.0.1:1}}]\nraft_transport: udp\n":                               "raft_transport",
		"node_id: 1\nraft_address: 127.0.0.1:1\ndata_dir: /x\nshards: [{name: g, shard_id: 1, members: {1: 127.0.0.1:1}}]\nraft_transport: dragonboat\n":                        "raft_transport \"dragonboat\" is no longer supported",
	}
	for body, field := range cases {
		p := filepath.Join(t.TempDir(), "meta.yaml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := metadata.LoadNodeConfig(p)
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("config %q: got %v, want an error naming %q", body, err, field)
		}
	}
	if _, err := metadata.NewNode(metadata.NodeConfig{}); !errors.Is(err, metadata.ErrInvalidArgument) {
		t.Errorf("empty config: %v", err)
	}
}
