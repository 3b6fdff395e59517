//go:build unix

package main

import "syscall"

// privateFiles makes every file and directory the process creates from
// now on its user's only (umask 077): data files 0600, directories 0700,
// including what the libraries below us (Dragonboat, Pebble) create with
// their own modes.
func privateFiles() { syscall.Umask(0o077) }
