//go:build !linux

package bolt

import "go.etcd.io/bbolt"

// releaseMapping does nothing here: see release_linux.go.
func releaseMapping(*bbolt.DB) {}
