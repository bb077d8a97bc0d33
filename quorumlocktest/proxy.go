package quorumlocktest

import (
	"net"
	"sync"
)

// front is a node's fixed loopback address: a TCP proxy in front of its
// backend that can refuse connections (stopped) or stop forwarding (hung).
// Its goroutines (one accept loop, two pumps per connection) end at stop.
type front struct {
	addr string

	mu      sync.Mutex
	ln      net.Listener  // nil while stopped
	target  string        // the backend's address
	hung    chan struct{} // nil, or closed at unhang
	links   map[*link]struct{}
	writing sync.RWMutex // read-held while a chunk is written (see forward)
	running sync.WaitGroup
}

// link is one client connection and its connection to the backend.
type link struct {
	client, server net.Conn
	once           sync.Once
	done           chan struct{}
}

func (l *link) close() {
	l.once.Do(func() {
		close(l.done)
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// listen opens addr ("127.0.0.1:0" for a new port) and starts accepting.
func (f *front) listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ln = ln
	if f.addr == "" {
		f.addr = ln.Addr().String()
	}
	f.running.Add(1)
	go f.accept(ln)
	return nil
}

func (f *front) accept(ln net.Listener) {
	defer f.running.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return // closed by stop
		}
		f.mu.Lock()
		target := f.target
		f.mu.Unlock()
		s, err := net.Dial("tcp", target)
		if err != nil {
			_ = c.Close()
			continue
		}
		l := &link{client: c, server: s, done: make(chan struct{})}
		f.mu.Lock()
		if f.ln != ln { // stopped meanwhile
			f.mu.Unlock()
			l.close()
			return
		}
		f.links[l] = struct{}{}
		f.running.Add(2)
		f.mu.Unlock()
		go f.pump(l, s, c)
		go f.pump(l, c, s)
	}
}

// pump copies src to dst, holding each chunk while the node is hung.
func (f *front) pump(l *link, dst, src net.Conn) {
	defer f.running.Done()
	defer func() {
		l.close()
		f.mu.Lock()
		delete(f.links, l)
		f.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !f.forward(l, dst, buf[:n]) {
			return
		}
		if err != nil {
			return
		}
	}
}

// forward writes p to dst once the node is not hung, and reports whether
// it did. It writes under f.writing, so that hang can wait for the chunks
// being written: after hang, nothing more gets through.
func (f *front) forward(l *link, dst net.Conn, p []byte) bool {
	for {
		f.writing.RLock()
		f.mu.Lock()
		hung := f.hung
		f.mu.Unlock()
		if hung == nil {
			_, err := dst.Write(p)
			f.writing.RUnlock()
			return err == nil
		}
		f.writing.RUnlock()
		select {
		case <-hung:
		case <-l.done:
			return false
		}
	}
}

// hang stops forwarding in both directions until unhang; connections are
// still accepted and what they send is held, as by a paused server. It
// returns once no chunk is being written: nothing gets through after it.
func (f *front) hang() {
	f.mu.Lock()
	if f.hung == nil {
		f.hung = make(chan struct{})
	}
	f.mu.Unlock()
	f.writing.Lock()
	f.writing.Unlock() //lint:ignore SA2001 waits for the writes in progress
}

func (f *front) unhang() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hung != nil {
		close(f.hung)
		f.hung = nil
	}
}

// stop closes the listener (connections are refused from now) and every
// connection, ends any hang, and waits for the proxy's goroutines.
func (f *front) stop() {
	f.mu.Lock()
	ln := f.ln
	f.ln = nil
	if ln != nil {
		_ = ln.Close()
	}
	for l := range f.links {
		l.close()
	}
	if f.hung != nil {
		close(f.hung)
		f.hung = nil
	}
	f.mu.Unlock()
	f.running.Wait()
}
