package admin

import (
	"errors"
	"strings"
	"syscall"

	"github.com/forewarn/forewarn"
)

// errNoSpace answers a write that the store could not make for want of
// disk space.
var errNoSpace = forewarn.Errorf(forewarn.ENOSPACE, "no space left on device: the server could not record the change, so it was not made; free space on the server's disk (reads and the metadata API keep working)")

// noSpace reports whether err is a write's failure for want of disk
// space: ENOSPC, or EDQUOT for a used-up quota.
//
// bbolt reports a failure to grow its file with the errno's text only
// ("file resize error: no space left on device"), so the text counts too.
func noSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) ||
		strings.Contains(err.Error(), syscall.ENOSPC.Error()) || strings.Contains(err.Error(), syscall.EDQUOT.Error())
}
