//go:build unix

package main

import "syscall"

// hardFileLimit returns the hard limit on open files, to which the
// server raises its soft limit at start.
func hardFileLimit() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	return uint64(lim.Max), nil
}
