package netfault

import "testing"

// The goroutines toxiproxy v2.5.0 leaves when a connection's writer dies
// with chunks in its toxics: the stubs, and (seen in CI) the link's reader
// blocked handing them the next chunk. Anything else is not that bug.
func TestStuckToxicsRecognisesToxiproxysBugOnly(t *testing.T) {
	const feeding = `1 @ 0x4c9e4e 0x454e1c
#	0x12c5984	github.com/Shopify/toxiproxy/v2/stream.(*ChanWriter).Write+0x144	io_chan.go:29
#	0x527d61	io.copyBuffer+0x2c1	io.go:431
#	0x144d592	github.com/Shopify/toxiproxy/v2.(*ToxicLink).read+0x72	link.go:122`
	const stub = `1 @ 0x4c9e4e 0x454e1c
#	0x12c9624	github.com/Shopify/toxiproxy/v2/toxics.(*NoopToxic).Pipe+0x1e4	noop.go:16
#	0x12c959d	github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run+0x15d	toxic.go:88`
	const other = `1 @ 0x4c9e4e 0x454e1c
#	0x144d592	github.com/Shopify/toxiproxy/v2.(*ToxicLink).write+0x72	link.go:150`
	for dump, want := range map[string]bool{
		stub:                     true,
		feeding + "\n\n" + stub:  true,
		stub + "\n\n" + other:    false,
		feeding + "\n\n" + other: false,
	} {
		if got := stuckToxics(dump); got != want {
			t.Errorf("stuckToxics(%q) = %v, want %v", dump, got, want)
		}
	}
}
