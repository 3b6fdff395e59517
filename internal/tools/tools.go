//go:build tools

// Package tools pins modules that the project will import but whose first
// importers are still being written, so concurrent work does not race on
// go.mod. It is removed once every module here has a real importer.
package tools

import (
	_ "github.com/HdrHistogram/hdrhistogram-go"
	_ "github.com/anishathalye/porcupine"
	_ "github.com/hashicorp/memberlist"
	_ "github.com/klauspost/compress/zstd"
	_ "github.com/lni/dragonboat/v4"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/spf13/cobra"
	_ "google.golang.org/grpc"
	_ "google.golang.org/protobuf/proto"
	_ "gopkg.in/yaml.v3"
	_ "pgregory.net/rapid"
)
