// Package region wires a region's processes together from configuration:
// `standalone` (metadata, bookie and broker in one process) and, later, the
// local multi-region dev cluster.
package region
