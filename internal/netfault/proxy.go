package netfault

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

const (
	// rebindTimeout bounds how long Heal keeps trying to listen again on the
	// address of a cut proxy while the port is in use. toxiproxy closes its
	// listener before Cut returns, so the port is only busy if another socket
	// took it in the meantime.
	rebindTimeout = 2 * time.Second

	// rebindBackoff is the pause between two such tries. Nothing signals that
	// a port has become free, so this is a plain sleep.
	rebindBackoff = 10 * time.Millisecond
)

// Names of the toxics this package adds; toxiproxy wants them unique per
// proxy. Streams are toxiproxy's: "upstream" carries what clients send,
// "downstream" what the upstream server answers.
const (
	latencyToxic     = "netfault_latency"
	latencyTailToxic = "netfault_latency_tail"
	blackholeToxic   = "netfault_blackhole"
	resetToxic       = "netfault_reset"
	drainToxic       = "netfault_drain"
)

// Proxy is one TCP proxy, listening on 127.0.0.1, in front of one upstream
// address (a Redis node). It forwards every connection it accepts to a new
// connection to the upstream, until a fault is injected. Make it with [New].
// Its methods are safe for concurrent use; they panic once the test that made
// the proxy has ended.
type Proxy struct {
	t        testing.TB
	upstream string
	server   *toxiproxy.ApiServer // gives proxies a silent logger, no metrics
	label    string               // value of labelKey on every goroutine toxiproxy starts for p

	mu        sync.Mutex
	addr      string           // listen address, fixed by the first start
	tp        *toxiproxy.Proxy // the current toxiproxy proxy; Heal replaces it
	cut       bool             // tp is stopped
	resetting bool             // tp resets every connection (ResetPeer)
	closed    bool             // cleanup has run
}

// New starts a proxy on a free port of 127.0.0.1 that forwards to upstream
// ("host:port") and returns once it accepts connections. The upstream is
// dialed once per accepted connection; if that dial fails, the proxy closes
// the client's connection.
//
// New registers a t.Cleanup that closes the listener and every connection
// through the proxy and then waits, at most 5s, until every goroutine
// toxiproxy started for it has ended; it fails the test if some have not.
// Nothing is left behind.
func New(t testing.TB, upstream string) *Proxy {
	t.Helper()
	p := &Proxy{
		t:        t,
		upstream: upstream,
		server:   toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop()),
	}
	// The address of p is unique among live proxies, and p lives until its
	// cleanup has waited for every goroutine carrying the label.
	p.label = fmt.Sprintf("%p", p)
	// Registered first, so that it also waits for the goroutine of a start
	// that fails.
	t.Cleanup(p.cleanup)

	tp, err := p.start("127.0.0.1:0")
	if err != nil {
		t.Fatalf("netfault: New %s: %v", upstream, err)
	}
	p.mu.Lock()
	p.tp, p.addr = tp, tp.Listen
	p.mu.Unlock()
	return p
}

// Addr returns the address clients should dial instead of the upstream,
// "127.0.0.1:port". It stays the same across [Proxy.Cut] and [Proxy.Heal].
func (p *Proxy) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
}

// Upstream returns the address the proxy forwards to, as given to [New].
func (p *Proxy) Upstream() string { return p.upstream }

// Latency delays every chunk of data the upstream sends back (the replies) by
// d, plus or minus a random amount up to jitter, counted from the moment the
// proxy read the chunk. It replaces the latency set by an earlier call: data
// held back by that one is delivered at once. Latency(0, 0) removes the
// latency. Requests are not delayed. Existing and new connections are
// affected alike; none is closed.
//
// toxiproxy works in whole milliseconds, so d and jitter must be whole
// milliseconds, not negative, with jitter no larger than d; other values fail
// the test.
//
// Known toxiproxy v2.5.0 limitation: if a client closes its connection while
// the latency still holds several chunks for it (a large reply, or replies
// to several pipelined commands), delivering them fails part way and
// toxiproxy leaves that connection's goroutines blocked for good; the cleanup
// then reports them. Replies of a lock's commands are small
// enough to travel as one chunk, and go-redis sends one command (or one
// pipeline) per connection at a time.
func (p *Proxy) Latency(d, jitter time.Duration) {
	p.t.Helper()
	if d < 0 || jitter < 0 || jitter > d || d%time.Millisecond != 0 || jitter%time.Millisecond != 0 {
		p.t.Fatalf("netfault: Latency(%v, %v) on %s: want whole milliseconds with 0 <= jitter <= d",
			d, jitter, p.Addr())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.checkOpenLocked()
	// The latency goes first, so that what it holds flows on through the tail.
	for _, name := range []string{latencyToxic, latencyTailToxic} {
		if err := p.removeToxicLocked(name); err != nil {
			p.t.Fatalf("netfault: Latency on %s: %v", p.addr, err)
		}
	}
	if d == 0 {
		return
	}
	// The tail is a pass-through toxic after the latency. toxiproxy makes a
	// toxic flush one held chunk at once when it adds a toxic right after it;
	// with the tail there, later faults (Blackhole, ResetPeer, Cut) are added
	// after the tail instead, and data held by the latency reaches them only
	// when its delay is over, as it would on a real network.
	err := p.addToxicsLocked(
		toxic{Name: latencyToxic, Type: "latency", Stream: "downstream", Attributes: map[string]int64{
			"latency": d.Milliseconds(), "jitter": jitter.Milliseconds(),
		}},
		toxic{Name: latencyTailToxic, Type: "noop", Stream: "downstream"},
	)
	if err != nil {
		p.t.Fatalf("netfault: Latency on %s: %v", p.addr, err)
	}
}

// Blackhole makes the proxy forward nothing: from now on, every byte sent
// either way on every connection, open or new, is dropped. The proxy still
// accepts connections and keeps them open, so clients see timeouts, not
// errors, and the upstream never sees the commands. Blackholing a blackholed
// proxy does nothing.
//
// Dropped bytes leave a hole in each connection's stream, so [Proxy.Heal]
// closes every connection that is open when it is called.
func (p *Proxy) Blackhole() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.checkOpenLocked()
	if p.tp.Toxics.GetToxic(blackholeToxic+"_upstream") != nil {
		return
	}
	// toxiproxy's timeout toxic with timeout 0 drops everything and never
	// closes the connection. Upstream first, so that no command slips through.
	if err := p.addToxicsLocked(bothWays(blackholeToxic, "timeout", map[string]int64{"timeout": 0})...); err != nil {
		p.t.Fatalf("netfault: Blackhole on %s: %v", p.addr, err)
	}
}

// ResetPeer breaks every connection: those open now are closed on both
// sides at once (clients see io.EOF or a reset), and those the proxy accepts
// from now on are closed with a TCP RST at their first bytes, which are
// dropped (clients see "connection reset by peer"), so neither a command nor
// its reply gets through. Dials still succeed. Calling it again does nothing;
// [Proxy.Heal] undoes it.
//
// The open connections are closed by replacing the toxiproxy proxy rather
// than by toxiproxy's reset_peer toxic: that toxic reads one chunk and stops,
// and toxiproxy v2.5.0 then leaves the connection's goroutines blocked for
// good if more chunks come, which a pub/sub connection receiving messages
// does. A new connection that is reset at its first chunk never gets that far.
func (p *Proxy) ResetPeer() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.checkOpenLocked()
	if p.resetting {
		return
	}
	if !p.cut {
		if err := p.retireLocked(); err != nil {
			p.t.Fatalf("netfault: ResetPeer on %s: %v", p.addr, err)
		}
		p.cut = true
	}
	tp, err := p.restartLocked()
	if err != nil {
		p.t.Fatalf("netfault: ResetPeer on %s: %v", p.addr, err)
	}
	p.tp, p.cut, p.resetting = tp, false, true
	// toxiproxy's reset_peer toxic with timeout 0 closes at the first chunk.
	if err := p.addToxicsLocked(bothWays(resetToxic, "reset_peer", map[string]int64{"timeout": 0})...); err != nil {
		p.t.Fatalf("netfault: ResetPeer on %s: %v", p.addr, err)
	}
}

// Cut partitions the proxy from its clients: it stops listening, so dials
// are refused, and closes every open connection on both sides, dropping the
// data in flight, including data held back by [Proxy.Latency]. It blocks
// until the listener is closed. Cutting a cut proxy does nothing;
// [Proxy.Heal] undoes it.
func (p *Proxy) Cut() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.checkOpenLocked()
	if p.cut {
		return
	}
	if err := p.retireLocked(); err != nil {
		p.t.Fatalf("netfault: Cut %s: %v", p.addr, err)
	}
	p.cut = true
}

// Heal removes every fault: it closes every open connection, dropping the
// data in flight (including data held back by [Proxy.Latency]), and starts
// listening again on the same address, so that for a moment dials may be
// refused; clients reconnect. (Removing a latency under open connections
// instead can hang toxiproxy v2.5.0 for good when a connection's writer
// died while the latency held several chunks for it: replies to pipelined
// commands, a client that closed its connection.) Heal returns once the proxy accepts connections. If the port has
// been taken by another socket in the meantime, Heal keeps trying for up to
// 2s and then fails the test. Healing a healthy proxy does nothing.
//
// A go-redis client whose dials were refused while the proxy was cut may go
// on failing after Heal: once a pool has seen PoolSize failed dials, go-redis
// returns the last dial error without dialing until a background probe,
// repeated every second, gets through.
func (p *Proxy) Heal() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.checkOpenLocked()
	if !p.cut && !p.resetting && len(p.tp.Toxics.GetToxicArray()) == 0 {
		return // healthy
	}
	if !p.cut {
		if err := p.retireLocked(); err != nil {
			p.t.Fatalf("netfault: Heal %s: %v", p.addr, err)
		}
		p.cut = true
	}
	// A new toxiproxy proxy rather than Start on the stopped one: the stopped
	// one's connections may still be draining through its toxics, and
	// removing toxics under a draining connection can leave toxiproxy's
	// goroutines blocked for good (the timeout toxic closes itself on removal
	// without letting the toxic before it go on). The new one has no toxics.
	tp, err := p.restartLocked()
	if err != nil {
		p.t.Fatalf("netfault: Heal %s: %v", p.addr, err)
	}
	p.tp, p.cut, p.resetting = tp, false, false
}

// start starts a toxiproxy proxy listening on listen and forwarding to
// p.upstream, and returns it once it accepts connections.
func (p *Proxy) start(listen string) (*toxiproxy.Proxy, error) {
	tp := toxiproxy.NewProxy(p.server, "netfault "+p.upstream, listen, p.upstream)
	var err error
	p.do(func() { err = tp.Start() })
	return tp, err
}

// restartLocked starts a new toxiproxy proxy on p.addr, retrying for up to
// rebindTimeout while the port is in use.
func (p *Proxy) restartLocked() (*toxiproxy.Proxy, error) {
	deadline := time.Now().Add(rebindTimeout)
	for {
		tp, err := p.start(p.addr)
		if err == nil {
			return tp, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			return nil, err
		}
		time.Sleep(rebindBackoff)
	}
}

// retireLocked stops p.tp for good, dropping the data in flight: it appends
// a toxic that drops everything at the end of both directions, removes the
// latency, which flushes what it held into that drop, then stops the proxy,
// which closes the listener and every connection. The connections'
// goroutines then end on their own, at once.
//
// Without the drop at the end, a connection whose writer fails on the closed
// socket would leave data held by the latency toxic with nobody to take it,
// and its goroutines blocked for good. Without removing the latency, its
// goroutine would go on holding each chunk for the rest of its delay.
func (p *Proxy) retireLocked() error {
	if err := p.addToxicsLocked(bothWays(drainToxic, "timeout", map[string]int64{"timeout": 0})...); err != nil {
		return err
	}
	for _, name := range []string{latencyToxic, latencyTailToxic} {
		if err := p.removeToxicLocked(name); err != nil {
			return err
		}
	}
	p.do(p.tp.Stop)
	return nil
}

// cleanup retires the proxy and waits for its goroutines. It reports
// failures with Errorf, so that the other cleanups still run.
func (p *Proxy) cleanup() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.tp != nil && !p.cut {
		if err := p.retireLocked(); err != nil {
			p.t.Errorf("netfault: stopping the proxy %s: %v", p.addr, err)
		}
		p.cut = true
	}
	if err := awaitGoroutines(p.label, goroutineTimeout); err != nil {
		if stuckToxics(err.Error()) {
			// A known toxiproxy v2.5.0 bug, not ours and not the code under
			// test: when a connection's writer dies while toxics still hold
			// several chunks (a pub/sub connection receiving messages through
			// a latency, closed by its client), the toxics before it block
			// for good on a channel nobody reads. They hold no socket.
			p.t.Logf("netfault: proxy %s: toxiproxy left toxic goroutines blocked (known toxiproxy bug, ignored): %v", p.addr, err)
			return
		}
		p.t.Errorf("netfault: proxy %s to %s: %v", p.addr, p.upstream, err)
	}
}

// stuckToxics reports whether every goroutine listed in a profile dump is one
// of toxiproxy's toxic stubs, or a link's reader blocked handing a chunk to
// them (the same bug: the chain it writes into no longer moves; see cleanup).
func stuckToxics(dump string) bool {
	records := strings.Split(dump, "\n\n")
	for _, r := range records {
		stub := strings.Contains(r, "toxiproxy/v2/toxics.(*ToxicStub).Run")
		feeding := strings.Contains(r, "toxiproxy/v2.(*ToxicLink).read") && strings.Contains(r, "toxiproxy/v2/stream.(*ChanWriter).Write")
		if strings.Contains(r, "@ 0x") && !stub && !feeding {
			return false
		}
	}
	return true
}

// IgnoreStuckToxics lists, for goleak.IgnoreAnyFunction in test binaries
// that use netfault, the functions of the goroutines toxiproxy v2.5.0 can
// leave blocked (see Proxy's cleanup): the toxic stubs, and the link readers
// blocked handing them a chunk.
var IgnoreStuckToxics = []string{
	"github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run",
	"github.com/Shopify/toxiproxy/v2.(*ToxicLink).read",
}

// checkOpenLocked panics if the test that made p has ended: its cleanup has
// waited for the proxy's goroutines, so nothing may start new ones, and t
// can no longer report anything.
func (p *Proxy) checkOpenLocked() {
	if p.closed {
		panic(fmt.Sprintf("netfault: proxy %s to %s used after the test that made it ended", p.addr, p.upstream))
	}
}

// do runs f, a call into toxiproxy, with p's goroutine label set, so that
// every goroutine f starts, and every goroutine those start, carries it. The
// calling goroutine's labels are reset when f returns.
func (p *Proxy) do(f func()) {
	pprof.Do(context.Background(), pprof.Labels(labelKey, p.label), func(context.Context) { f() })
}

// toxic is the JSON form of a toxic that ToxicCollection.AddToxicJson reads.
// The toxicity is left out, so it defaults to 1: the toxic applies to every
// connection.
type toxic struct {
	Name       string           `json:"name"`
	Type       string           `json:"type"`
	Stream     string           `json:"stream"`
	Attributes map[string]int64 `json:"attributes,omitempty"`
}

// bothWays returns a toxic of type typ for each direction, upstream first,
// named name plus "_upstream" or "_downstream".
func bothWays(name, typ string, attrs map[string]int64) []toxic {
	return []toxic{
		{Name: name + "_upstream", Type: typ, Stream: "upstream", Attributes: attrs},
		{Name: name + "_downstream", Type: typ, Stream: "downstream", Attributes: attrs},
	}
}

// addToxicsLocked appends toxics, in order, to the end of p.tp's chains.
// Each applies to open connections before the next is added.
func (p *Proxy) addToxicsLocked(toxics ...toxic) error {
	for _, tx := range toxics {
		body, err := json.Marshal(tx)
		if err != nil {
			return err
		}
		p.do(func() { _, err = p.tp.Toxics.AddToxicJson(bytes.NewReader(body)) })
		if err != nil {
			return fmt.Errorf("adding toxic %s: %w", tx.Name, err)
		}
	}
	return nil
}

// removeToxicLocked removes the toxic called name from p.tp, if it has one.
func (p *Proxy) removeToxicLocked(name string) error {
	if p.tp.Toxics.GetToxic(name) == nil {
		return nil
	}
	var err error
	// toxiproxy reads nothing from the context but its logger.
	p.do(func() { err = p.tp.Toxics.RemoveToxic(context.Background(), name) })
	if err != nil {
		return fmt.Errorf("removing toxic %s: %w", name, err)
	}
	return nil
}
