package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

func newElectCmd(g *globals) *cobra.Command {
	f := &runFlags{}
	c := &cobra.Command{
		Use:   "elect [flags] NAME VALUE -- CMD [ARG...]",
		Short: "Run CMD while leading the election on NAME with VALUE",
		Long: `Elect campaigns in the election on NAME with VALUE (what "quorumlock leader
NAME" and the library's Election.Leader and Observe report), waits its turn
behind the candidates before it, and runs CMD once it leads, as run runs CMD
under a lock: renewed while CMD runs, QUORUMLOCK_NAME and
QUORUMLOCK_FENCING_TOKEN (the leadership's) in its environment, signals
forwarded, CMD's group stopped if the leadership is lost, before its
validity ends. When CMD exits, elect resigns: another candidate leads at once.
Should elect itself be killed (SIGKILL, the OOM killer), on Linux CMD gets
SIGKILL with it; the processes CMD started do not (in "sh -c 'a; b'", b is
one: "exec b" makes it CMD), nor does CMD on other systems, and they would
run beside the next leader, which leads within the TTL: see "quorumlock
help run".

It waits for leadership without limit unless --wait says otherwise; --wait 0
or --no-wait make one attempt.

Exit status: CMD's own when it ran while leading throughout (128+N when
signal N killed it); otherwise
  64  EX_USAGE        the command line is wrong
  69  EX_UNAVAILABLE  too few nodes answered (also when --wait ran out
                      before a majority answered, and at once when they
                      refuse the credentials or ACL)
  70  EX_SOFTWARE     the leadership was lost while CMD ran
  75  EX_TEMPFAIL     another candidate leads (--no-wait or --wait 0, or --wait ran out)
  126, 127            CMD could not be run, or was not found
  129-131, 143        SIGHUP, SIGINT, SIGQUIT or SIGTERM came before CMD
                      started`,
		Args: func(c *cobra.Command, args []string) error {
			if c.ArgsLenAtDash() != 2 || len(args) < 3 {
				return &exitError{code: exitUsage, err: errors.New("elect takes NAME and VALUE, then CMD: quorumlock elect [flags] NAME VALUE -- CMD [ARG...]")}
			}
			if args[1] == "" { // "quorumlock leader" prints "TOKEN VALUE": an empty one would read as nobody's
				return &exitError{code: exitUsage, err: errors.New("elect: VALUE is empty; give what identifies this candidate, such as its host name")}
			}
			if strings.ContainsAny(args[1], "\r\n") { // "quorumlock leader" prints it on one line
				return &exitError{code: exitUsage, err: errors.New("elect: VALUE has a line break; give it on one line")}
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			f.forever = !c.Flags().Changed("wait")
			return f.elect(c.Context(), g, args[0], args[1], args[2:])
		},
	}
	c.Flags().DurationVar(&f.ttl, "ttl", 10*time.Second, "the leadership's TTL: how long it outlives an elect that died; renewed every TTL/3; at least "+minTTL.String())
	c.Flags().DurationVar(&f.wait, "wait", 0, "how long to wait for leadership (default: no limit); 0: one attempt, as --no-wait; else at least "+minBound.String()+", a round trip to the nodes")
	c.Flags().BoolVar(&f.noWait, "no-wait", false, "make one attempt; exit 75 if another candidate leads")
	c.Flags().DurationVar(&f.killAfter, "kill-after", 10*time.Second, "after a loss, the most CMD has between SIGTERM and SIGKILL; never past TTL/20 before the validity's end")
	c.MarkFlagsMutuallyExclusive("wait", "no-wait")
	return c
}

func (f *runFlags) elect(ctx context.Context, g *globals, name, value string, argv []string) error {
	return f.hold(ctx, g, name, argv, func(ctx context.Context, rs *redlock.Redlock) (*lease, error) {
		opts := []mutex.Option{mutex.WithTTL(f.ttl)}
		wait := ctx
		if f.noWait {
			opts = append(opts, mutex.WithTries(1))
		} else if !f.forever {
			var cancel context.CancelFunc
			wait, cancel = context.WithTimeout(ctx, f.wait)
			defer cancel()
		}
		e := rs.NewElection(name, opts...)
		looking, stopLooking := context.WithCancel(wait)
		var looks sync.WaitGroup
		looks.Go(func() { warnWhileUnknown(looking, os.Stderr, e, "waiting to lead") })
		err := e.Campaign(wait, value)
		stopLooking()
		looks.Wait()
		if err != nil {
			return nil, obtainFailure(err, fmt.Sprintf("another candidate leads the election on %q", name))
		}
		done := e.Done()
		ended := func() error {
			select {
			case <-done:
				if err := e.LostCause(); err != nil {
					return err
				}
				return fmt.Errorf("the leadership in the election on %q ended: %w", name, mutex.ErrNotHeld)
			default:
				return nil
			}
		}
		resign := func(ctx context.Context) error {
			if err := ended(); err != nil {
				return err // lost before the resignation: CMD may have overlapped the next leader
			}
			return e.Resign(ctx)
		}
		return &lease{token: e.FencingToken(), ttl: f.ttl, until: e.Until, lost: func() <-chan struct{} { return done }, cause: ended, unlock: resign, leader: true}, nil
	})
}

func newLeaderCmd(g *globals) *cobra.Command {
	watch := false
	c := &cobra.Command{
		Use:   "leader [--watch] NAME",
		Short: "Show who leads the election on NAME",
		Long: `Leader prints who leads the election on NAME, as a majority of the nodes
show it: one line, the leadership's fencing token, a space, and the leader's
value. With --watch it prints the current leader, then a line for every
change (a new leader, a new value proclaimed, and "0" alone while nobody
leads), until SIGINT or SIGTERM; it never prints a leader older than one it
printed. While too few nodes answer to tell who leads, it says so on stderr
(looking every second), and again when they answer. It writes nothing to
the nodes.

Exit status: 0 when it printed the leader (with --watch: when a signal ended
it); 75 (EX_TEMPFAIL) when nobody leads (without --watch); 69
(EX_UNAVAILABLE) when too few nodes answered; 64 (EX_USAGE) for a wrong
command line or name.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if !watch {
				return g.adminCall(c.Context(), func(ctx context.Context, rs *redlock.Redlock) error {
					return printLeader(ctx, c.OutOrStdout(), rs.NewElection(args[0]))
				})
			}
			return g.watchLeader(c.Context(), c.OutOrStdout(), c.ErrOrStderr(), args[0])
		},
	}
	c.Flags().BoolVar(&watch, "watch", false, "print every change of leader until SIGINT or SIGTERM")
	return c
}

// printLeader prints e's leader, or the exit for why it cannot.
func printLeader(ctx context.Context, out io.Writer, e *mutex.Election) error {
	l, err := e.Leader(ctx)
	if errors.Is(err, mutex.ErrNoLeader) {
		return exit(exitHeld, "nobody leads the election: %v", err)
	}
	if err != nil {
		return failure(err, exitUnavailable)
	}
	fmt.Fprintln(out, leaderLine(l))
	return nil
}

func leaderLine(l mutex.Leader) string {
	if l == (mutex.Leader{}) {
		return "0"
	}
	return fmt.Sprint(l.FencingToken, " ", l.Value)
}

// watchLeader prints the leader of the election on name and every change,
// until SIGINT or SIGTERM. A first read, bounded by --timeout, reports a
// bad name or too few nodes as leader without --watch does.
func (g *globals) watchLeader(ctx context.Context, out, errOut io.Writer, name string) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	connecting, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	rs, err := g.connect(connecting)
	if err != nil {
		return err
	}
	defer closeBy(connecting, rs)
	e := rs.NewElection(name)
	if _, err := e.Leader(connecting); err != nil && !errors.Is(err, mutex.ErrNoLeader) {
		return failure(err, exitUnavailable)
	}
	var looks sync.WaitGroup
	defer looks.Wait()
	looks.Go(func() { warnWhileUnknown(ctx, errOut, e, "the last line may be stale") })
	for l := range e.Observe(ctx) {
		fmt.Fprintln(out, leaderLine(l))
	}
	return nil
}

// warnWhileUnknown looks at e's leader every second until ctx ends, and
// says on errOut when too few nodes answer to tell who leads (and what
// follows for the caller: so), and when they answer again: Observe, or
// Campaign, which cannot tell, say nothing meanwhile.
func warnWhileUnknown(ctx context.Context, errOut io.Writer, e *mutex.Election, so string) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	unknown := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		_, err := e.Leader(ctx)
		switch now := errors.Is(err, mutex.ErrNodesUnavailable); {
		case now && !unknown:
			fmt.Fprintf(errOut, "quorumlock: who leads is unknown, %s: %v\n", so, err)
		case !now && unknown && ctx.Err() == nil:
			fmt.Fprintln(errOut, "quorumlock: the nodes answer again")
		}
		unknown = errors.Is(err, mutex.ErrNodesUnavailable)
	}
}
