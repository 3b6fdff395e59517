// Package api holds Meridian's wire contracts: the .proto files of the
// metadata, bookie, client, admin and replication services and their
// generated Go code (committed; `make proto` regenerates it). It contains no
// logic.
package api
