package relay

import (
	"context"
	"net"
	"syscall"
)

// listen opens l's TCP listener, bound to l.Device when it names one.
func listen(l Listener) (net.Listener, error) {
	lc := net.ListenConfig{}
	if l.Device != "" {
		lc.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				serr = syscall.SetsockoptString(int(fd), syscall.SOL_SOCKET, syscall.SO_BINDTODEVICE, l.Device)
			})
			if err != nil {
				return err
			}
			return serr
		}
	}
	return lc.Listen(context.Background(), "tcp", l.Addr)
}
