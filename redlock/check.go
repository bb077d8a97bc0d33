package redlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/quorum"
)

// Severity ranks a [Finding].
type Severity int

const (
	// Note is information that needs no change for safety.
	Note Severity = iota + 1
	// Risky: locks work, but an ordinary event (a restart, a clock step, a
	// latency spike, a release nobody hears) can cost them.
	Risky
	// Unfit: the node, as it is set up, cannot hold locks, or can let two
	// owners in.
	Unfit
)

// String returns "note", "risky" or "unfit".
func (s Severity) String() string {
	if s >= Note && s <= Unfit {
		return [...]string{"note", "risky", "unfit"}[s-Note]
	}
	return fmt.Sprintf("Severity(%d)", int(s))
}

// Finding is one thing [Redlock.Check] found about one node, or about the
// node set as a whole.
type Finding struct {
	Node string // the node, as in [Redlock.Nodes]; "" for the node set
	// Shard is, on a Cluster node, the primary the finding is about and its
	// slots, "127.0.0.1:7001 (slots 0-5460)"; "" on a node of one server.
	Shard    string
	Severity Severity
	// Setting is what the finding is about, as Redis spells it:
	// "maxmemory-policy", "appendonly", "appendfsync", "role", "run_id",
	// "redis_version", "redis_mode", "acl", "CONFIG", "TIME" (the clock),
	// "latency", "seeds" (a Cluster client's), "nodes" (the set's number
	// of nodes); "" for a node that did not answer.
	Setting string
	Value   string // the node's value of Setting, "" if none
	Message string // what it means for locks, and what to do
}

// String returns "node: setting=value: severity: message", with " shard
// <Shard>" after the node on a Cluster node, and "node set" for the node.
func (f Finding) String() string {
	var b strings.Builder
	b.WriteString(cmp.Or(f.Node, "node set"))
	if f.Shard != "" {
		b.WriteString(" shard " + f.Shard)
	}
	b.WriteString(": ")
	if f.Setting != "" {
		b.WriteString(f.Setting)
		if f.Value != "" {
			b.WriteString("=" + f.Value)
		}
		b.WriteString(": ")
	}
	b.WriteString(f.Severity.String() + ": " + f.Message)
	return b.String()
}

// NodeReport is what [Redlock.Check] measured on one node.
type NodeReport struct {
	Node      string // as in [Redlock.Nodes]
	Checked   bool   // every check ran; false when ctx ended first
	Reachable bool   // it answered PING
	Version   string // redis_version, "" if unknown
	RunID     string // run_id (INFO server), "" if unknown
	// RTT is the median round trip of three TIME commands; ClockOffset is
	// the node's clock minus this process's at the middle of the fastest.
	RTT         time.Duration
	ClockOffset time.Duration
}

// Report is the result of [Redlock.Check].
type Report struct {
	Nodes    []NodeReport // one per node, in the order of [Redlock.Nodes]
	Findings []Finding    // by node, worst first within a node
}

// OK reports whether every node was checked and no finding is [Risky] or
// [Unfit]. Notes do not count.
func (r *Report) OK() bool {
	return r != nil && r.complete() &&
		!slices.ContainsFunc(r.Findings, func(f Finding) bool { return f.Severity >= Risky })
}

// String returns one line per finding and per node left unchecked, or a
// line saying that the nodes were checked and nothing was found.
func (r *Report) String() string {
	if r == nil {
		return "<nil report>"
	}
	var lines []string
	for _, n := range r.Nodes {
		if !n.Checked {
			lines = append(lines, n.Node+": not checked: the context ended first")
		}
	}
	for _, f := range r.Findings {
		lines = append(lines, f.String())
	}
	if len(lines) == 0 {
		return fmt.Sprintf("%d nodes checked: nothing found", len(r.Nodes))
	}
	return strings.Join(lines, "\n")
}

// Check inspects every node in parallel, without writing anything, and reports
// what makes it unfit or risky for locks (reachability, role, eviction policy,
// persistence, duplicates, ACL, round trip, clock offset, version). Node
// problems are findings; the error is for misuse (mutex.ErrInvalid), a closed
// set (mutex.ErrClosed; nothing sent) or ctx ending, with the partial report
// (a Cluster node then unchecked, with its shards' findings and one naming
// each primary that had not answered). See docs/operations.md, "Before production".
func (r *Redlock) Check(ctx context.Context) (*Report, error) {
	if err := r.usable(ctx, "check"); err != nil {
		return nil, err
	}
	nodes := r.set.Nodes
	type result struct {
		i int
		inspection
	}
	results := make(chan result, len(nodes)) // no sender blocks
	cluster := make([]bool, len(nodes))
	clusters := 0 // Cluster nodes yet to report: each does at once when ctx ends
	for i, n := range nodes {
		cc, ok := n.Client().(*redis.ClusterClient)
		if cluster[i] = ok; ok {
			clusters++
		}
		go func() {
			if ok {
				results <- result{i, r.inspectCluster(ctx, cc, n.Addr())}
				return
			}
			results <- result{i, r.inspect(ctx, n.Client(), n.Addr(), "")}
		}()
	}
	got := make([]*inspection, len(nodes))
	var err error
collect:
	for range nodes {
		var res result
		select {
		case res = <-results:
		case <-ctx.Done():
			err = fmt.Errorf("redlock: Check stopped before every node answered: %w", ctx.Err())
			if clusters == 0 {
				break collect
			}
			res = <-results
		}
		if got[res.i] = &res.inspection; cluster[res.i] {
			clusters--
		}
	}
	rep := r.report(got)
	if err == nil && !rep.complete() { // a node stopped early: ctx ended
		err = fmt.Errorf("redlock: Check stopped before every node answered: %w", context.Cause(ctx))
	}
	return rep, err
}

func (r *Report) complete() bool {
	return !slices.ContainsFunc(r.Nodes, func(n NodeReport) bool { return !n.Checked })
}

// report assembles the nodes' inspections (nil: not finished) into a Report,
// adding the findings that compare nodes with each other.
func (r *Redlock) report(got []*inspection) *Report {
	rep := &Report{Nodes: make([]NodeReport, len(got))}
	first := map[string]serverAt{} // run_id -> where it was first seen
	for i, in := range got {
		if in == nil || !in.Checked {
			rep.Nodes[i] = NodeReport{Node: r.set.Nodes[i].Addr()}
			if in != nil { // a Cluster's, cut short: what its shards said, and which did not answer
				rep.Findings = append(rep.Findings, in.findings...)
			}
			continue
		}
		rep.Nodes[i] = in.NodeReport
		findings := in.findings
		for _, id := range in.runIDs {
			if j, dup := first[id.id]; dup && (j.node != i || j.shard != id.shard) {
				findings = append(findings, Finding{
					Node: in.Node, Shard: id.shard, Severity: Unfit, Setting: "run_id", Value: id.id,
					Message: fmt.Sprintf("the same redis-server as %s: it votes twice, and a majority of the nodes is no longer a majority of servers; list each server once", j),
				})
			} else if !dup {
				first[id.id] = serverAt{i, rep.Nodes[i].Node, id.shard}
			}
		}
		slices.SortStableFunc(findings, func(a, b Finding) int { return cmp.Compare(b.Severity, a.Severity) })
		rep.Findings = append(rep.Findings, findings...)
	}
	if f, ok := sizeNote(len(got)); ok {
		rep.Findings = append(rep.Findings, f)
	}
	return rep
}

// sizeNote is a note on a set of n nodes that bears fewer nodes down than
// its size could: fewer than 3, or an even number (the Redlock spec
// suggests 5).
func sizeNote(n int) (Finding, bool) {
	f := Finding{Severity: Note, Setting: "nodes", Value: strconv.Itoa(n)}
	switch {
	case n == 1:
		f.Message = "one node: no quorum to survive its failure, and a failover or a restart that loses its data can give a lock to a second owner; use 3 or 5 independent nodes"
	case n == 2:
		f.Message = "2 nodes need both for a majority: one down stops every lock; 3 bear one down"
	case n%2 == 0:
		f.Message = fmt.Sprintf("%d nodes need %d for a majority and bear %d down, as %d would; an odd number gets more from each node", n, quorum.Majority(n), n-quorum.Majority(n), n-1)
	default:
		return f, false
	}
	return f, true
}

// inspection is one node's (or one Cluster shard's) report and findings.
type inspection struct {
	NodeReport
	shard    string // the Cluster primary inspected, as Finding.Shard; "" for a node of one server
	findings []Finding
	info     map[string]string // INFO's fields; nil if refused
	runIDs   []runID           // of the servers inspected
}

// runID is a server's run_id and the shard it was read on.
type runID struct{ id, shard string }

// serverAt is where a run_id was first seen: a node, and its shard.
type serverAt struct {
	node        int
	name, shard string
}

func (s serverAt) String() string {
	if s.shard == "" {
		return s.name
	}
	return s.name + " shard " + s.shard
}

func (in *inspection) add(sev Severity, setting, value, format string, args ...any) {
	in.findings = append(in.findings, Finding{
		Node: in.Node, Shard: in.shard, Severity: sev, Setting: setting, Value: value,
		Message: fmt.Sprintf(format, args...),
	})
}

// inspect checks one node, or the Cluster primary shard of one. Once ctx
// has ended it stops and leaves Checked false; its result is then not used.
func (r *Redlock) inspect(ctx context.Context, nc any, addr, shard string) inspection {
	in := inspection{NodeReport: NodeReport{Node: addr}, shard: shard}
	c, ok := nc.(*redis.Client)
	if !ok {
		in.Checked = true
		in.add(Note, "", "", "a %T: Check inspects nodes given as one server (*redis.Client) or a Cluster only; inspect its servers on their own", nc)
		return in
	}
	if err := c.Ping(ctx).Err(); err != nil {
		if ctx.Err() != nil {
			return in
		}
		in.Checked = true
		switch {
		case isReplyErr(err):
			in.Reachable = true
			in.add(Unfit, "", "", "refused PING (%v): every lock round would fail on it", err)
		case errors.Is(err, mutex.ErrInvalid): // listed twice: the URLs are at fault, not the server
			in.Reachable = true
			in.add(Unfit, "", "", "%v", err)
		default:
			in.add(Unfit, "", "", "unreachable (%v): it counts as a failed node in every round", err)
		}
		return in
	}
	in.Reachable = true
	steps := []func(context.Context, *redis.Client, *inspection){
		r.checkClock, r.checkServer, r.checkSettings, r.checkACL,
	}
	for _, step := range steps {
		step(ctx, c, &in)
		if ctx.Err() != nil {
			return in
		}
	}
	in.Checked = true
	return in
}

// isReplyErr reports whether err is the server's answer (it refused the
// command) rather than a failure to reach it.
func isReplyErr(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.ErrClosed)
}

// denied reports whether a reply error means the command may not run: an
// ACL refusal, or a command renamed or disabled.
func denied(err error) bool {
	if !isReplyErr(err) {
		return false
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "noperm") || strings.Contains(msg, "no permissions") ||
		strings.Contains(msg, "can't run this command") ||
		strings.Contains(msg, "unknown command") || strings.Contains(msg, "unknown subcommand")
}
