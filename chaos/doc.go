// Package chaos injects faults (network proxy, process control, disk
// faults) into real clusters and checks that no acknowledged message is
// lost. (Not built yet.)
package chaos
