package netfault

import (
	"bytes"
	"fmt"
	"runtime/pprof"
	"strings"
	"time"
)

const (
	// labelKey is the runtime/pprof label that names, on every goroutine
	// toxiproxy starts for a Proxy, the Proxy it works for.
	labelKey = "netfault.proxy"

	// goroutineTimeout bounds the wait, at cleanup, for a proxy's goroutines
	// to end once its connections are closed.
	goroutineTimeout = 5 * time.Second

	// maxPollInterval caps the pause between two looks at the goroutines.
	maxPollInterval = 20 * time.Millisecond

	// stuckAfter is how long only toxic stubs may remain before the wait
	// takes them for toxiproxy's stuck ones (see Proxy.cleanup) rather than
	// ones still draining: those end within milliseconds of the close.
	stuckAfter = 500 * time.Millisecond
)

// awaitGoroutines blocks, at most timeout, until no goroutine carries the
// labelKey label with value label. It returns an error that lists the stacks
// of those still running after timeout.
//
// toxiproxy's Proxy.Stop waits for its accept loop but not for the
// goroutines of the connections it closes (a reader, a writer and one per
// toxic in each direction); those end on their own a moment later, when the
// closed sockets have been seen through the chain of toxics. toxiproxy offers
// no way to wait for them, hence this poll of the goroutine profile, where
// goroutine labels are the only way to tell one proxy's goroutines from
// another's.
//
// When only toxic stubs have remained for stuckAfter, it returns at once
// with the error instead of waiting out timeout: cleanups of many proxies
// would otherwise add up to minutes.
func awaitGoroutines(label string, timeout time.Duration) error {
	start := time.Now()
	deadline := start.Add(timeout)
	interval := 100 * time.Microsecond
	var stuckSince time.Time
	for {
		stacks, err := labelled(label)
		if err != nil {
			return err
		}
		if stacks == "" {
			return nil
		}
		now := time.Now()
		switch {
		case !stuckToxics(stacks):
			stuckSince = time.Time{}
		case stuckSince.IsZero():
			stuckSince = now
		case now.Sub(stuckSince) >= stuckAfter:
			return fmt.Errorf("goroutines still running %v after the proxy stopped:\n%s", now.Sub(start).Round(time.Millisecond), stacks)
		}
		if now.After(deadline) {
			return fmt.Errorf("goroutines still running %v after the proxy stopped:\n%s", timeout, stacks)
		}
		time.Sleep(interval)
		interval = min(2*interval, maxPollInterval)
	}
}

// labelled returns the records of the goroutine profile (debug=1: one record
// per distinct stack and labels, with a count) whose labels include labelKey
// with value label, separated by blank lines; "" if there are none.
func labelled(label string) (string, error) {
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		return "", fmt.Errorf("reading the goroutine profile: %w", err)
	}
	// Labels print as # labels: {"key":"value", ...}, quoted with %q.
	needle := fmt.Sprintf("%q:%q", labelKey, label)
	var found []string
	for _, record := range strings.Split(buf.String(), "\n\n") {
		if strings.Contains(record, needle) {
			found = append(found, strings.TrimSpace(record))
		}
	}
	return strings.Join(found, "\n\n"), nil
}
