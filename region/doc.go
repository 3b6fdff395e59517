// Package region wires a region's processes together from configuration:
// StartStandalone runs metadata (one Dragonboat replica hosting the global
// and the regional shard), one bookie (E=Qw=Qa=1) and one broker in one
// process under one data directory; the local multi-region dev cluster
// comes later. Package regiontest starts a region with N brokers and M
// bookies on loopback for tests, with Kill and Pause (zombie) of a broker.
//
// It holds no logic of its own: every behaviour lives in the packages it
// starts.
package region
