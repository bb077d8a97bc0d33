package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

type runFlags struct {
	ttl, wait, killAfter time.Duration
	forever              bool // elect without --wait: no deadline
	noWait               bool
	limit                int
	limitSet             bool // --limit was given, 0 included
	metadata             string
	metadataSet          bool // --metadata was given, "" included
}

// defaultMetadata is what run stores with a lock without --metadata: this
// host's name, quorumlock's pid and the time it started, in UTC.
func defaultMetadata(started time.Time) string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return fmt.Sprintf("host=%s pid=%d start=%s", host, os.Getpid(), started.UTC().Format(time.RFC3339))
}

// minTTL is the smallest --ttl run accepts. A renewal starts a third of the
// TTL into the validity and may wait the per-node timeout for a node that
// does not answer (50ms at least, for short TTLs); it must come back before
// the lease is declared lost, at the validity's end minus TTL/10, which the
// drift allowance (TTL/100 + 2ms) brings forward further:
// TTL/3 + 50ms <= TTL - TTL/10 - TTL/100 - 2ms holds from about 94ms.
const minTTL = 100 * time.Millisecond

// killMargin is how long before the validity's end CMD's group gets SIGKILL
// whatever --kill-after says: TTL/20, half the time between the loss, which
// the library declares at the validity's end minus TTL/10, and that end. CMD
// has the first half to end at SIGTERM; the second covers this process's own
// delay in sending SIGKILL on a busy host (500ms at the default TTL, 5ms at
// minTTL), on top of the drift allowance the validity already leaves out.
// Once kill(2) returns, CMD's processes run no more of their own code.
func killMargin(ttl time.Duration) time.Duration { return ttl / 20 }

func newRunCmd(g *globals) *cobra.Command {
	f := &runFlags{}
	c := &cobra.Command{
		Use:   "run [flags] NAME -- CMD [ARG...]",
		Short: "Run CMD while holding the lock on NAME",
		Long: `Run obtains the lock on NAME (one of --limit permits with --limit), keeps it
renewed while CMD runs, and releases it when CMD exits. CMD gets
QUORUMLOCK_NAME and QUORUMLOCK_FENCING_TOKEN (a number above every earlier
holder's, for a store that refuses stale writers) in its environment, and
SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to quorumlock (each followed by
SIGCONT while the lock is valid, so that a CMD stopped on its own sees it). CMD runs in a process group of
its own, which every signal goes to; like timeout(1), it cannot read from the
terminal. Once CMD exits, whatever it left in its group is killed (SIGKILL)
before the lock is released: a process that must outlive CMD has to leave
the group (setsid(1)), and then runs without the lock.

If the lock is lost while CMD runs (renewals fail to reach a majority, or an
operator forced it open), CMD's group gets SIGTERM at once, then SIGKILL at
the earliest of: --kill-after later, TTL/20 before the validity's end, and
CMD's own end. Whatever --kill-after says, and even if renewals fail without
the loss being declared, CMD's group is killed before the lock's validity
ends, as measured on this host's monotonic clock. Should quorumlock itself be
killed (SIGKILL, the OOM killer), on Linux CMD gets SIGKILL with it; the
processes CMD started do not (in "sh -c 'a; b'", b is one: "exec b" makes
it CMD), nor does CMD on other systems, and they run on without the lock,
which expires within the TTL. Ctrl-Z (SIGTSTP) stops CMD's group before
quorumlock; at SIGCONT, CMD goes on only while the validity lasts, else its
group is killed unrun. What that cannot cover (those processes; this host
paused, or quorumlock alone stopped by SIGSTOP while CMD runs on; a write
CMD already sent; clocks of the nodes that run fast) only a store that
checks QUORUMLOCK_FENCING_TOKEN can refuse.

The lock carries metadata, which "quorumlock inspect NAME" shows: by default
"host=HOST pid=PID start=TIME" (this host, quorumlock's pid, its start in
UTC, RFC 3339, when run began); --metadata replaces it, and --metadata "" stores none. At
most 1024 bytes of UTF-8.

A lock taken with --limit is a semaphore's permit, not the same lock as one
taken without it: every run on NAME must use the same --limit. The nodes
keep the limit until one TTL after the last permit on NAME ended; until
then another --limit is refused (64). Permits carry no metadata.

Exit status: CMD's own when it ran holding the lock throughout (128+N when
signal N killed it, as flock(1) and shells report it); otherwise
  64  EX_USAGE        the command line is wrong
  69  EX_UNAVAILABLE  too few nodes answered to obtain the lock (also when
                      --wait ran out before a majority answered, and at
                      once when they refuse the credentials or ACL: the
                      message says so, and doctor exits 78 for it)
  70  EX_SOFTWARE     the lock was lost while CMD ran
  75  EX_TEMPFAIL     the lock is taken: held by another owner, or other callers
                      queued ahead of this one in the nodes' queues (--no-wait or
                      --wait 0, or --wait ran out)
  126, 127            CMD could not be run, or was not found
  129-131, 143        SIGHUP, SIGINT, SIGQUIT or SIGTERM came before CMD
                      started
The codes are BSD sysexits(3) ones, as lockf(1) uses them; flock(1) exits 1
when the lock is held, which cannot be told from CMD's own failure.`,
		Args: func(c *cobra.Command, args []string) error {
			if c.ArgsLenAtDash() == 0 || len(args) < 2 || (len(args) == 2 && args[1] == "--") {
				return &exitError{code: exitUsage, err: errors.New("run takes NAME, then CMD: quorumlock run [flags] NAME -- CMD [ARG...]")}
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			argv := args[1:]
			if argv[0] == "--" {
				argv = argv[1:]
			}
			f.limitSet = c.Flags().Changed("limit")
			f.metadataSet = c.Flags().Changed("metadata")
			return f.run(c.Context(), g, args[0], argv)
		},
	}
	// Parsing stops at NAME, so that what follows is CMD's, "--" or not.
	c.Flags().SetInterspersed(false)
	c.Flags().DurationVar(&f.ttl, "ttl", 10*time.Second, "the lock's TTL: how long it outlives a quorumlock that died; renewed every TTL/3; at least "+minTTL.String())
	c.Flags().DurationVar(&f.wait, "wait", 30*time.Second, "how long to wait for the lock; 0: one attempt, as --no-wait; else at least "+minBound.String()+", a round trip to the nodes")
	c.Flags().BoolVar(&f.noWait, "no-wait", false, "make one attempt; exit 75 if the lock is held")
	c.Flags().IntVar(&f.limit, "limit", 0, "take one of N permits (N >= 1) of a semaphore on NAME instead of a lock: N runs at once")
	c.Flags().DurationVar(&f.killAfter, "kill-after", 10*time.Second, "after a loss, the most CMD has between SIGTERM and SIGKILL; never past TTL/20 before the validity's end")
	c.Flags().StringVar(&f.metadata, "metadata", "", `stored with the lock, shown by inspect; default "host=HOST pid=PID start=TIME"; "" for none`)
	c.MarkFlagsMutuallyExclusive("wait", "no-wait")
	c.MarkFlagsMutuallyExclusive("limit", "metadata")
	return c
}

func (f *runFlags) run(ctx context.Context, g *globals, name string, argv []string) error {
	switch {
	case f.limit < 0 || (f.limitSet && f.limit == 0):
		return exit(exitUsage, "--limit %d: give at least 1 permit, or leave --limit out for a plain lock", f.limit)
	}
	return f.hold(ctx, g, name, argv, func(ctx context.Context, rs *redlock.Redlock) (*lease, error) {
		return f.acquire(ctx, rs, name)
	})
}

// check returns the usage error in the flags run and elect share, if any.
func (f *runFlags) check() error {
	switch {
	case f.ttl < minTTL:
		return exit(exitUsage, "--ttl %v: give at least %v; a shorter lock cannot be renewed in time", f.ttl, minTTL)
	case !f.forever && (f.wait < 0 || (f.wait > 0 && f.wait < minBound)):
		return exit(exitUsage, "--wait %v: give 0 (one attempt, as --no-wait) or at least %v; a shorter wait ends before the nodes can answer", f.wait, minBound)
	case f.killAfter < 0:
		return exit(exitUsage, "--kill-after %v: give a duration of at least 0", f.killAfter)
	}
	return nil
}

// hold connects, obtains a lease with acquire, and runs argv under it
// (supervise); a signal before the lease is obtained ends it unrun.
func (f *runFlags) hold(ctx context.Context, g *globals, name string, argv []string,
	acquire func(context.Context, *redlock.Redlock) (*lease, error)) error {
	if err := f.check(); err != nil {
		return err
	}
	f.noWait = f.noWait || (!f.forever && f.wait == 0)
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)

	type result struct {
		rs  *redlock.Redlock
		l   *lease
		err error
	}
	acquiring, cancel := context.WithCancel(ctx)
	if !f.noWait && !f.forever { // --wait counts from the start: reaching the nodes is part of the wait
		cancel()
		acquiring, cancel = context.WithTimeout(ctx, f.wait)
	}
	defer cancel()
	got := make(chan result, 1)
	go func() {
		rs, err := g.connect(acquiring)
		var l *lease
		if err == nil {
			if l, err = acquire(acquiring, rs); err != nil {
				_ = rs.Close()
			}
		}
		got <- result{rs, l, err}
	}()
	var r result
	select {
	case r = <-got:
	case sig := <-sigs:
		cancel()
		if r = <-got; r.err == nil { // obtained meanwhile: give it back
			_ = r.l.release(ctx)
			_ = r.rs.Close()
		}
		return exit(exitSignal+int(sig.(syscall.Signal)), "%v before the lock on %q was obtained; CMD not run", sig, name)
	}
	if r.err != nil {
		var ee *exitError
		if errors.As(r.err, &ee) {
			return ee
		}
		return failure(r.err, exitHeld)
	}
	defer r.rs.Close()
	return supervise(name, argv, r.l, f, sigs)
}

// lease is an obtained lock or permit, as run uses it.
type lease struct {
	token  uint64
	ttl    time.Duration
	until  func() time.Time // the validity's end; zero once found lost
	lost   func() <-chan struct{}
	cause  func() error
	unlock func(context.Context) error
	leader bool // elect's leadership, not run's lock
}

// what names the lease in messages.
func (l *lease) what() string {
	if l.leader {
		return "leadership"
	}
	return "lock"
}

// release gives the lease back, waiting at most its TTL: past it, the keys
// are gone anyway.
func (l *lease) release(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.ttl)
	defer cancel()
	return l.unlock(ctx)
}

// acquire obtains the lock or a permit on name, as the flags say.
func (f *runFlags) acquire(ctx context.Context, rs *redlock.Redlock, name string) (*lease, error) {
	opts := []mutex.Option{mutex.WithTTL(f.ttl), mutex.WithAutoExtend(), mutex.WithFencing()}
	md := []mutex.Option{mutex.WithMetadata(defaultMetadata(time.Now()))}
	switch {
	case f.metadataSet && f.metadata == "":
		md = nil
	case f.metadataSet:
		md = []mutex.Option{mutex.WithMetadata(f.metadata)}
	}
	wait, cancel := context.WithTimeout(ctx, f.wait)
	defer cancel()
	var l *lease
	var err error
	if f.limit == 0 {
		m := rs.NewMutex(name, append(opts, md...)...)
		if f.noWait {
			err = m.TryLockContext(ctx)
		} else {
			err = m.LockContext(wait)
		}
		if err == nil {
			l = &lease{token: m.FencingToken(), until: m.Until, lost: m.Lost, cause: m.LostCause, unlock: m.UnlockContext}
		}
	} else {
		s := rs.NewSemaphore(name, f.limit, opts...)
		var p *mutex.Permit
		if f.noWait {
			p, err = s.TryAcquireContext(ctx)
		} else {
			p, err = s.AcquireContext(wait)
		}
		if err == nil {
			l = &lease{token: p.FencingToken(), until: p.Until, lost: p.Lost, cause: p.LostCause, unlock: p.ReleaseContext}
		}
	}
	if err != nil {
		return nil, obtainFailure(err, fmt.Sprintf("lock %q is taken", name))
	}
	l.ttl = f.ttl
	return l, nil
}

// obtainFailure is the exit for a failed acquisition or campaign; held says
// that another owner has it. Held (75) only when the nodes said so
// (mutex.ErrContended): a wait that ran out before a majority answered at
// all is the nodes' silence (69), not a holder.
func obtainFailure(err error, held string) error {
	switch {
	case errors.Is(err, mutex.ErrInvalid): // failure makes it a usage error
	case errors.Is(err, mutex.ErrContended):
		return exit(exitHeld, "%s: %v", held, err)
	case errors.Is(err, mutex.ErrNodesUnavailable):
		return fmt.Errorf("too few nodes answered: %w", err)
	case errors.Is(err, context.DeadlineExceeded):
		return exit(exitUnavailable, "too few nodes answered before the wait ran out: %v", err)
	case errors.Is(err, mutex.ErrNotObtained) && !errors.Is(err, mutex.ErrClosed): // no node said it is held
		return exit(exitUnavailable, "not obtained, and no node said another owner holds it: %v", err)
	}
	return err
}
