package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9/logging"
	"github.com/spf13/cobra"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// Exit statuses besides a command's own; see the package comment.
const (
	exitUsage       = 64  // EX_USAGE
	exitUnavailable = 69  // EX_UNAVAILABLE
	exitLost        = 70  // EX_SOFTWARE
	exitHeld        = 75  // EX_TEMPFAIL
	exitUnfit       = 78  // EX_CONFIG
	exitCannotRun   = 126 // as shells report a command found but not runnable
	exitNotFound    = 127 // as shells report a command not found
	exitSignal      = 128 // plus the signal's number
)

// exitError ends quorumlock with code, after printing err unless it is nil.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func exit(code int, format string, args ...any) *exitError {
	return &exitError{code: code, err: fmt.Errorf(format, args...)}
}

func main() {
	// go-redis's own log lines (a refused dial, a closed pub/sub connection)
	// repeat what the errors say, node by node.
	logging.Disable()
	os.Exit(execute(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// execute runs quorumlock with args and returns its exit status.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	var ee *exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ee.err != nil {
			fmt.Fprintln(stderr, "quorumlock:", ee.err)
		}
		// Bad input the library found (a --limit the nodes disagree with, a
		// reserved name) is named in the message; help would not fix it.
		if ee.code == exitUsage && !errors.Is(ee.err, mutex.ErrInvalid) {
			fmt.Fprintln(stderr, "Run 'quorumlock help' for usage.")
		}
		return ee.code
	}
	// cobra's own: an unknown command or flag, a wrong number of arguments.
	fmt.Fprintf(stderr, "quorumlock: %v\nRun 'quorumlock help' for usage.\n", err)
	return exitUsage
}

// minBound is the shortest --timeout, and --wait other than 0, quorumlock
// accepts. Every call of a fresh quorumlock dials the nodes and waits for a
// round trip to them: a few milliseconds on loopback (inspect 2-5ms, doctor
// 5-10ms, a first attempt at a lock 1-2ms, measured on a 2-core host), more
// across a network. A shorter bound ends before healthy nodes can answer,
// and would report them as failed (69) or a free lock as held (75).
const minBound = 10 * time.Millisecond

// globals are the flags every subcommand shares.
type globals struct {
	nodes     string
	keyPrefix string
	prefixSet bool // --key-prefix given, "" included: QUORUMLOCK_KEY_PREFIX is not read
	timeout   time.Duration
	// quarantine is redlock.WithRestartQuarantine's d; 0: off.
	quarantine time.Duration
}

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "quorumlock",
		Short: "Locks on a majority of independent Redis primaries, from the shell",
		Long: `quorumlock takes quorumlock's locks from the shell: "run" runs a command only
while it holds a lock on a majority of the nodes, "elect" while it leads an
election, whose leader "leader" shows; "inspect", "unlock --force" and
"doctor" are for operators.

The nodes come from --nodes or QUORUMLOCK_NODES: comma-separated URLs,
redis://[user:password@]host:port[/db] or rediss:// for TLS, and for a node
that is a Redis Cluster redis+cluster://host:port?addr=host2:port&addr=...
Passwords are never printed; prefer the variable, since flags show in ps.

Exit status: 64 (EX_USAGE) for a wrong command line (a --timeout under
10ms included) and 69 (EX_UNAVAILABLE) when too few nodes answered (for
doctor, which checks every node: when one did not), in every subcommand;
see each one's help for the others (BSD sysexits(3) codes, as lockf(1)
uses them).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return &exitError{code: exitUsage, err: err} })
	pf := root.PersistentFlags()
	pf.StringVar(&g.nodes, "nodes", "", "node URLs, comma-separated (default $QUORUMLOCK_NODES)")
	pf.StringVar(&g.keyPrefix, "key-prefix", "", "the key prefix the locks' users set with redlock.WithKeyPrefix (default $QUORUMLOCK_KEY_PREFIX; --key-prefix \"\" for none)")
	pf.DurationVar(&g.timeout, "timeout", 10*time.Second, "bound on inspect, unlock, leader (its first read with --watch) and doctor, connecting included; at least "+minBound.String()+": a connection and a round trip to the nodes")
	pf.DurationVar(&g.quarantine, "restart-quarantine", 0, "keep a node that restarted or lost its data out of majorities for this long, as the locks' users do with redlock.WithRestartQuarantine; at least every --ttl (default $QUORUMLOCK_RESTART_QUARANTINE, else off)")
	root.PersistentPreRunE = func(c *cobra.Command, _ []string) error {
		g.prefixSet = c.Flag("key-prefix").Changed
		if c.Flag("nodes").Changed && strings.TrimSpace(g.nodes) == "" { // an unset variable in a script: not QUORUMLOCK_NODES's nodes
			return exit(exitUsage, "--nodes is empty: give the nodes' URLs, comma-separated, or leave --nodes out to use QUORUMLOCK_NODES")
		}
		if v := os.Getenv("QUORUMLOCK_RESTART_QUARANTINE"); v != "" && !c.Flag("restart-quarantine").Changed {
			d, err := time.ParseDuration(v)
			if err != nil {
				return exit(exitUsage, "QUORUMLOCK_RESTART_QUARANTINE=%q: not a duration such as 30s", v)
			}
			g.quarantine = d
		}
		if g.quarantine < 0 {
			return exit(exitUsage, "--restart-quarantine %v: give 0 (off) or more", g.quarantine)
		}
		if g.timeout < minBound {
			return exit(exitUsage, "--timeout %v: give at least %v; a shorter bound ends before the nodes can answer", g.timeout, minBound)
		}
		return nil
	}
	root.AddCommand(newRunCmd(g), newElectCmd(g), newLeaderCmd(g), newInspectCmd(g), newUnlockCmd(g), newDoctorCmd(g), newVersionCmd())
	return root
}

// connect builds the node set from --nodes or QUORUMLOCK_NODES.
func (g *globals) connect(ctx context.Context) (*redlock.Redlock, error) {
	list := g.nodes
	if list == "" {
		list = os.Getenv("QUORUMLOCK_NODES")
	}
	if strings.TrimSpace(list) == "" {
		return nil, exit(exitUsage, "no nodes: give --nodes or set QUORUMLOCK_NODES to the nodes' URLs, comma-separated")
	}
	urls := strings.Split(list, ",")
	for i, u := range urls {
		if urls[i] = strings.TrimSpace(u); urls[i] == "" { // a node left out of a template would change the majority
			return nil, exit(exitUsage, "entry %d of %d in the node list is empty: give every node's URL, comma-separated", i+1, len(urls))
		}
	}
	prefix := g.keyPrefix
	if !g.prefixSet {
		prefix = os.Getenv("QUORUMLOCK_KEY_PREFIX")
	}
	if deadline, ok := ctx.Deadline(); ok { // the ping for duplicate servers takes at most half of what is left: the call the rest, though a minority hangs
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, time.Now().Add(time.Until(deadline)/2))
		defer cancel()
	}
	rs, err := redlock.NewFromURLs(ctx, urls, redlock.WithKeyPrefix(prefix), redlock.WithRestartQuarantine(g.quarantine))
	if err != nil { // its errors never show a password
		if errors.Is(err, mutex.ErrInvalid) {
			return nil, &exitError{code: exitUsage, err: err}
		}
		return nil, &exitError{code: exitUnavailable, err: err}
	}
	return rs, nil
}

// failure is the exit for err from an operator's call or an acquisition:
// bad input, too few nodes, or else code.
func failure(err error, code int) *exitError {
	switch {
	case errors.Is(err, mutex.ErrInvalid):
		code = exitUsage
	case errors.Is(err, mutex.ErrNodesUnavailable), errors.Is(err, context.DeadlineExceeded) && code != exitHeld:
		code = exitUnavailable
	}
	return &exitError{code: code, err: err}
}
