// Command quorumlock takes quorumlock's locks from the shell: it runs a
// command only while it holds a lock on a majority of independent Redis
// primaries, and inspects, force-unlocks and checks them for operators.
//
//	export QUORUMLOCK_NODES=redis://h1:6379,redis://h2:6379,redis://h3:6379
//	quorumlock run --ttl 10s --wait 30s nightly-report -- ./report.sh
//	quorumlock run --limit 3 exports -- ./export.sh
//	quorumlock elect scheduler "$HOSTNAME" -- ./scheduler
//	quorumlock leader --watch scheduler
//	quorumlock inspect nightly-report
//	quorumlock unlock --force nightly-report
//	quorumlock doctor
//
// run stores "host=HOST pid=PID start=TIME" with the lock (--metadata to
// change it), which inspect shows.
//
// The nodes come from --nodes or QUORUMLOCK_NODES, one URL per node as
// redlock.NewFromURLs takes them; prefer the variable for URLs with
// passwords, which quorumlock never prints but a --nodes flag shows in ps.
//
// Exit status of run and elect: CMD's own when it ran holding the lock (or
// leading) throughout (128+N when signal N killed it, as in flock(1) and
// shells), else one of the BSD sysexits(3) codes, as lockf(1) uses them (for
// elect, 75 means another candidate leads; leader exits 75 when nobody
// leads):
//
//	64  EX_USAGE        the command line is wrong (every subcommand)
//	69  EX_UNAVAILABLE  too few nodes answered (every subcommand, also when --wait ran out before a majority answered; doctor: a node did not)
//	70  EX_SOFTWARE     the lock was lost while CMD ran; CMD was stopped
//	75  EX_TEMPFAIL     the lock is taken: held by another owner, or other callers
//	                    queued ahead of this one in the nodes' queues (--no-wait or
//	                    --wait 0, or --wait ran out)
//	78  EX_CONFIG       doctor found a node that answered unfit for locks as set up
//	126, 127            CMD could not be run, or was not found (as in shells)
//	129, 130, 131, 143  quorumlock got SIGHUP, SIGINT, SIGQUIT or SIGTERM before CMD started
//
// On Linux, CMD gets SIGKILL when quorumlock itself is killed; the
// processes CMD started do not, nor does CMD on other systems.
//
// See docs/operations.md, "From the shell", and `quorumlock help run`.
package main
