package redistest

import (
	"errors"
	"net"
)

// freePorts returns n distinct TCP ports that were free on 127.0.0.1 a moment
// ago. It holds all n listeners open until it has them all, so the ports
// differ from each other; another process may still take one before
// redis-server binds it, which callers handle by retrying with a new port.
func freePorts(n int) (ports []int, err error) {
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range listeners {
			err = errors.Join(err, l.Close())
		}
		if err != nil {
			ports = nil
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
