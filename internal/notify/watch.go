package notify

import "slices"

// Watcher is one observer of a key's own release channel, where the scripts
// publish what every observer of the key should know ("m <key>": the key's
// metadata changed, or its lock was released with it), as opposed to the
// hub's channel, which carries a waiter's turn. Its methods are safe for
// concurrent use.
type Watcher struct {
	h       *Hub
	channel string
	wake    chan struct{} // one slot
}

// Wake is signalled when a message arrives on the watched channel, and when
// a node confirms the subscription (first, or again after a reconnection: a
// message published before then was not heard).
func (w *Watcher) Wake() <-chan struct{} { return w.wake }

// Watch subscribes to channel, a key's release channel (Channel), on every
// node that has pub/sub, in the background; it never blocks. Call Stop when
// done: the connections close once nobody waits or watches, after lingering.
func (h *Hub) Watch(channel string) *Watcher {
	w := &Watcher{h: h, channel: channel, wake: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.openSessionsLocked()
	if h.watchers == nil {
		h.watchers = map[string][]*Watcher{}
	}
	if len(h.watchers[channel]) == 0 {
		h.broadcast(request{subscribe: channel})
	}
	h.watchers[channel] = append(h.watchers[channel], w)
	return w
}

// Stop ends the watch; calling it again does nothing.
func (w *Watcher) Stop() {
	h := w.h
	h.mu.Lock()
	defer h.mu.Unlock()
	ws := h.watchers[w.channel]
	i := slices.Index(ws, w)
	if i < 0 {
		return
	}
	ws = slices.Delete(ws, i, i+1)
	if len(ws) > 0 {
		h.watchers[w.channel] = ws
		return
	}
	delete(h.watchers, w.channel)
	if h.sessions != nil {
		h.broadcast(request{unsubscribe: w.channel})
	}
	h.scheduleSweep()
}

// watched handles a message, or a subscription's confirmation, on a channel
// other than the hub's: it wakes the channel's watchers.
func (h *Hub) watched(channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range h.watchers[channel] {
		signal(w.wake)
	}
}
