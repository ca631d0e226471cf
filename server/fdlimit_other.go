//go:build !unix

package server

import "errors"

// raiseFileLimit reports that this system has no limit on open files to
// raise.
func raiseFileLimit() (uint64, error) {
	return 0, errors.ErrUnsupported
}
