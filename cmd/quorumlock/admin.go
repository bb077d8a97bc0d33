package main

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/quorumlock/quorumlock/redlock"
)

// adminCall connects, runs call bounded by --timeout, and closes.
func (g *globals) adminCall(ctx context.Context, call func(context.Context, *redlock.Redlock) error) error {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	rs, err := g.connect(ctx)
	if err != nil {
		return err
	}
	defer closeBy(ctx, rs)
	return call(ctx, rs)
}

// closeBy closes rs, waiting for it only until ctx ends: an operator's call
// holds no lock, and the process exits next, closing the connections that
// Close still waited on (a hung node's). --timeout bounds Close too.
func closeBy(ctx context.Context, rs *redlock.Redlock) {
	closed := make(chan struct{})
	go func() { _ = rs.Close(); close(closed) }()
	select {
	case <-closed:
	case <-ctx.Done():
	}
}

// report prints what an operator's call returned, if anything, and the
// exit for its error.
func report[T any, P interface {
	*T
	fmt.Stringer
}](c *cobra.Command, result P, err error) error {
	if result != nil {
		fmt.Fprintln(c.OutOrStdout(), result)
	}
	if err != nil {
		return failure(err, exitUnavailable)
	}
	return nil
}

func newInspectCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "inspect NAME",
		Short: "Show who holds the lock on NAME, node by node",
		Long: `Inspect shows, node by node, each lock key of NAME (a lock's, a read-write
lock's, the permits of a semaphore named NAME) with its token and remaining
TTL, the token that holds it on a majority, and the fencing counter. It
writes nothing. Finding permits scans every node's keys: about a second per
million keys of a node.

Exit status: 0 when a majority of the nodes answered (a node that failed is
shown as failed); 69 (EX_UNAVAILABLE) when fewer did; 64 (EX_USAGE) for a
wrong command line or name.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return g.adminCall(c.Context(), func(ctx context.Context, rs *redlock.Redlock) error {
				in, err := rs.Inspect(ctx, args[0])
				return report(c, in, err)
			})
		},
	}
}

func newUnlockCmd(g *globals) *cobra.Command {
	force := false
	c := &cobra.Command{
		Use:   "unlock --force NAME",
		Short: "Remove the lock on NAME whatever its holder (for operators)",
		Long: `Unlock --force removes every lock key of NAME from every node, whoever holds
it, after raising the fencing counter on a majority above every fencing
token issued so far; it prints that number, which a store that checks
fencing tokens can be given to refuse the evicted holder now. The holder is
not stopped: it finds out at its next renewal (a "quorumlock run" stops its
command then). Use it for a holder that is stuck, never for one that works.
With nodes hung, each of its three steps (read the counters, raise them,
remove the keys) waits for them for up to 200ms: give --timeout 1s or more.

Exit status: 0 when a majority of the nodes did it; 69 (EX_UNAVAILABLE) when
fewer answered; 64 (EX_USAGE) without --force, or for a wrong name.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if !force {
				return exit(exitUsage, "unlock removes the lock on %q whoever holds it; add --force to do so", args[0])
			}
			return g.adminCall(c.Context(), func(ctx context.Context, rs *redlock.Redlock) error {
				ev, err := rs.ForceUnlock(ctx, args[0])
				return report(c, ev, err)
			})
		},
	}
	c.Flags().BoolVar(&force, "force", false, "remove the lock whoever holds it")
	return c
}

func newDoctorCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "Check every node's settings for locks",
		Long: `Doctor runs redlock's Check on every node (reachability, role, eviction
policy, persistence, duplicates, ACL, round trip, clock offset, version) and
prints one line per finding. It writes nothing.

Exit status: 0 when every node answered and none is unfit (risky findings
and notes are printed); 78 (EX_CONFIG) when a node that answered is unfit
for locks as it is set up, which waiting cannot fix; else 69
(EX_UNAVAILABLE) when a node did not answer (down, unreachable, paused) or
the check did not finish within --timeout; 64 (EX_USAGE) for a wrong
command line.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return g.adminCall(c.Context(), func(ctx context.Context, rs *redlock.Redlock) error {
				rep, err := rs.Check(ctx)
				if rep != nil {
					fmt.Fprintln(c.OutOrStdout(), rep)
				}
				if ee := doctorExit(rep); ee != nil {
					return ee
				}
				if err != nil {
					return &exitError{code: exitUnavailable, err: err}
				}
				return nil
			})
		},
	}
}

// doctorExit is doctor's exit for rep's findings (nil: none unfit): 78
// for the first node that is unfit as it is set up, else 69 for the first
// that did not answer, which Check reports as unfit too, with no setting.
func doctorExit(rep *redlock.Report) *exitError {
	if rep == nil {
		return nil
	}
	reachable := map[string]bool{}
	for _, n := range rep.Nodes {
		reachable[n.Node] = n.Reachable
	}
	var down *exitError
	for _, f := range rep.Findings {
		if f.Severity != redlock.Unfit {
			continue
		}
		where := f.Node
		if f.Shard != "" {
			where += " shard " + f.Shard
		}
		if f.Setting == "" && !reachable[f.Node] {
			if down == nil {
				down = exit(exitUnavailable, "%s did not answer: %s", where, f.Message)
			}
			continue
		}
		return exit(exitUnfit, "%s is unfit for locks: %s", where, f.Message)
	}
	return down
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the versions of quorumlock, its library and Go",
		Long: `Version prints the command's and the library's versions: a release's
version, or for a build from a checkout "devel" and the revision, time and
whether the tree was modified, as far as the build recorded them.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			bi, _ := debug.ReadBuildInfo()
			command, library := versions(bi)
			fmt.Fprintf(c.OutOrStdout(), "quorumlock %s\nlibrary %s: %s\n%s %s/%s\n",
				command, libraryPath, library, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}

const libraryPath = "github.com/quorumlock/quorumlock"

// pseudoVersion matches the end of a Go pseudo-version: the commit's time
// (UTC, yyyymmddhhmmss) and its revision's first 12 hex digits.
var pseudoVersion = regexp.MustCompile(`[-.](\d{14})-([0-9a-f]{12})(\+[0-9A-Za-z.]+)?$`)

// versions returns what version says of the command and of the library,
// from the build information (nil: unknown).
func versions(bi *debug.BuildInfo) (command, library string) {
	if bi == nil {
		return "unknown", "unknown"
	}
	vcs := map[string]string{}
	for _, s := range bi.Settings {
		vcs[s.Key] = s.Value
	}
	command, library = moduleVersion(bi.Main.Version, vcs), "unknown"
	for _, d := range bi.Deps {
		switch r := d.Replace; {
		case d.Path != libraryPath:
		case r == nil:
			library = moduleVersion(d.Version, nil)
		case strings.HasPrefix(r.Path, ".") || filepath.IsAbs(r.Path):
			// A directory, as go.mod's replace of a checkout: its version
			// means nothing.
			library = "local checkout (" + r.Path + ")"
		default:
			library = moduleVersion(r.Version, nil) + " of " + r.Path
		}
	}
	return command, library
}

// moduleVersion returns v if it is a release's; else "devel" with what is
// known of the revision: from vcs (the build's vcs.* settings) or from v if
// it is a pseudo-version.
func moduleVersion(v string, vcs map[string]string) string {
	m := pseudoVersion.FindStringSubmatch(v)
	if v != "" && v != "(devel)" && m == nil && !strings.HasSuffix(v, "+dirty") {
		return v
	}
	revision, at, modified := vcs["vcs.revision"], vcs["vcs.time"], vcs["vcs.modified"] == "true"
	if revision == "" && m != nil {
		revision, modified = m[2], m[3] == "+dirty"
		if t, err := time.Parse("20060102150405", m[1]); err == nil {
			at = t.Format(time.RFC3339)
		}
	}
	var details []string
	if revision != "" {
		details = append(details, "revision "+revision[:min(len(revision), 12)])
	}
	if at != "" {
		details = append(details, at)
	}
	if modified {
		details = append(details, "modified")
	}
	if len(details) == 0 {
		return "devel"
	}
	return "devel (" + strings.Join(details, ", ") + ")"
}
