package admin

import "github.com/forewarn/forewarn"

// errNoSpace answers a write that the store could not make for want of
// disk space (forewarn.NoSpace).
var errNoSpace = forewarn.Errorf(forewarn.ENOSPACE, "no space left on device: the server could not record the change, so it was not made; free space on the server's disk (reads and the metadata API keep working)")
