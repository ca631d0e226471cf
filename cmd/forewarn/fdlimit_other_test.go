//go:build !unix

package main

import "errors"

// hardFileLimit reports that this system has no limit on open files.
func hardFileLimit() (uint64, error) {
	return 0, errors.ErrUnsupported
}
