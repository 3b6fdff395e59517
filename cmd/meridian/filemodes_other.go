//go:build !unix

package main

// privateFiles is a no-op where there is no umask; the files Meridian
// creates itself still get 0600/0700.
func privateFiles() {}
