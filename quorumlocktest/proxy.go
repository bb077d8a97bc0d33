package quorumlocktest

import (
	"net"
	"sync"
)

// front is a node's fixed loopback address: a TCP proxy in front of its
// backend that can fail every connection (stopped) or stop forwarding
// (hung). It keeps its port for its whole life, so no other socket can take
// the address while the node is stopped. Its goroutines (one accept loop,
// two pumps per connection) end at close.
type front struct {
	ln   net.Listener
	addr string

	mu      sync.Mutex
	stopped bool
	target  string        // the backend's address
	hung    chan struct{} // nil, or closed at unhang
	links   map[*link]struct{}
	writing sync.RWMutex   // read-held while a chunk is written (see forward)
	pumps   sync.WaitGroup // the links' goroutines
	accepts sync.WaitGroup // the accept loop
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

// newFront listens on a new loopback port and forwards to target.
func newFront(target string) (*front, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &front{ln: ln, addr: ln.Addr().String(), target: target, links: map[*link]struct{}{}}
	f.accepts.Go(f.accept)
	return f, nil
}

func (f *front) accept() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return // closed by close
		}
		f.mu.Lock()
		stopped, target := f.stopped, f.target
		f.mu.Unlock()
		if stopped {
			reset(c)
			continue
		}
		s, err := net.Dial("tcp", target)
		if err != nil {
			reset(c)
			continue
		}
		l := &link{client: c, server: s, done: make(chan struct{})}
		f.mu.Lock()
		if f.stopped || f.target != target { // stopped or restarted meanwhile
			f.mu.Unlock()
			l.close()
			continue
		}
		f.links[l] = struct{}{}
		f.pumps.Add(2)
		f.mu.Unlock()
		go f.pump(l, s, c)
		go f.pump(l, c, s)
	}
}

// reset closes c with a TCP reset, as a refused connection fails: at once.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// pump copies src to dst, holding each chunk while the node is hung.
func (f *front) pump(l *link, dst, src net.Conn) {
	defer f.pumps.Done()
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
// being written.
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
// returns once no chunk is being written.
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

// stop fails every connection from now on and closes those there are, ends
// any hang, and waits for their goroutines. restartOn, if not "", is the
// backend new connections go to once started again.
func (f *front) stop(restartOn string) {
	f.mu.Lock()
	f.stopped = true
	if restartOn != "" {
		f.target = restartOn
	}
	for l := range f.links {
		l.close()
	}
	f.mu.Unlock()
	f.unhang()
	f.pumps.Wait()
}

// start forwards new connections again.
func (f *front) start() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = false
}

// close ends the proxy: connections, listener and goroutines.
func (f *front) close() {
	f.stop("")
	_ = f.ln.Close()
	f.accepts.Wait()
}
