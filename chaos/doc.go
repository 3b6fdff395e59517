// Package chaos injects faults into real clusters: a user-space link proxy
// that delays, jitters and cuts the traffic between regions (Network), and
// process control for clusters of OS processes.
package chaos
