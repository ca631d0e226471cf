//go:build linux

package bolt

import (
	"go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// releaseMapping drops the pages of the store's file mapping from the
// process, inside a read transaction so that bbolt cannot remap the file
// meanwhile. The page cache keeps them, and a later read maps them again
// with a minor fault. A commit of many keys reads pages all over the
// file, and the kernel maps the cached pages around each page read as
// well (fault-around), so without this a commit of 1,000 VMs among
// 100,000 left most of the file in the server's RSS.
func releaseMapping(db *bbolt.DB) {
	_ = db.View(func(tx *bbolt.Tx) error {
		_, _, errno := unix.Syscall(unix.SYS_MADVISE, db.Info().Data, uintptr(tx.Size()), unix.MADV_DONTNEED)
		if errno != 0 {
			return errno
		}
		return nil
	})
}
