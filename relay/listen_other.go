//go:build !linux

package relay

import (
	"errors"
	"net"
)

// listen opens l's TCP listener; binding to a device is Linux's.
func listen(l Listener) (net.Listener, error) {
	if l.Device != "" {
		return nil, errors.New("binding a listener to a network interface needs Linux")
	}
	return net.Listen("tcp", l.Addr)
}
