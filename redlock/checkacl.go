package redlock

import (
	"context"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/notify"
)

// probe is a command the library sends, or its scripts call, with the
// arguments ACL DRYRUN checks it with: the key and channel are ones no lock
// uses, and nothing is run.
type probe struct {
	group probeGroup
	args  []any
}

type probeGroup int

const (
	scripts   probeGroup = iota // EVAL, EVALSHA and what the scripts call
	loading                     // SCRIPT LOAD
	notices                     // PUBLISH, SUBSCRIBE
	keyAccess                   // the set's keys
)

// checkKey is a key name of the set's prefix that no lock uses (the names
// under "quorumlock:" are the library's): ACL rules on the prefix apply to
// it. Check never writes it.
func (r *Redlock) checkKey() string { return r.set.Keys.Prefix + "quorumlock:check" }

func (r *Redlock) probes() []probe {
	k, ch := r.checkKey(), notify.Channel(r.checkKey())
	ps := []probe{
		{scripts, []any{"EVAL", "return 1", 1, k}},
		{scripts, []any{"EVALSHA", strings.Repeat("0", 40), 1, k}},
		{loading, []any{"SCRIPT", "LOAD", "return 1"}},
	}
	for _, cmd := range [][]any{
		{"GET", k}, {"SET", k, "v", "PX", 1}, {"PEXPIRE", k, 1}, {"PTTL", k},
		{"DEL", k}, {"EXISTS", k}, {"INCR", k},
		{"ZADD", k, 1, "m"}, {"ZREM", k, "m"}, {"ZRANGE", k, 0, 0},
		{"ZRANGEBYSCORE", k, "-inf", "+inf"}, {"ZREMRANGEBYSCORE", k, "-inf", "+inf"},
		{"ZCARD", k}, {"ZSCORE", k, "m"}, {"TIME"}, {"TYPE", k}, {"SCAN", 0, "MATCH", k},
		{"HGET", k, "f"}, {"HSET", k, "f", "v"}, {"HDEL", k, "f"}, {"HEXISTS", k, "f"},
		{"HGETALL", k}, {"HMGET", k, "f"}, {"HLEN", k},
	} {
		ps = append(ps, probe{scripts, cmd})
	}
	if r.set.Notify {
		ps = append(ps, probe{notices, []any{"PUBLISH", ch, "quorumlock:check"}}, probe{notices, []any{"SUBSCRIBE", ch}})
	}
	return ps
}

// checkACL finds the commands the node's user may not run: with ACL DRYRUN
// where the user may use it (Redis 7 and later), otherwise by sending the
// commands that change nothing and reading their errors. INFO and TIME are
// judged by checkServer and checkClock, which send them.
func (r *Redlock) checkACL(ctx context.Context, c *redis.Client, in *inspection) {
	refused := map[probeGroup][]string{}
	user, err := c.Do(ctx, "ACL", "WHOAMI").Text()
	if err == nil && c.Do(ctx, "ACL", "DRYRUN", user, "PING").Val() == "OK" { // the user may use DRYRUN
		for _, p := range r.probes() {
			res, err := c.Do(ctx, append([]any{"ACL", "DRYRUN", user}, p.args...)...).Text()
			if err == nil && res == "OK" || err != nil && !isReplyErr(err) {
				continue
			}
			if strings.HasSuffix(res, "' key") {
				refused[keyAccess] = []string{"~" + r.checkKey()}
				continue
			}
			refused[p.group] = append(refused[p.group], name(p.args))
		}
	} else {
		r.aclByErrors(ctx, c, refused)
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "unknown") { // ACL exists (Redis 6 and later)
			in.add(Note, "acl", "", "ACL DRYRUN is not available to this user: the commands the lock scripts write with (SET, PEXPIRE, DEL, INCR, ZADD, ...) and SUBSCRIBE were not verified; give the user the rules in docs/operations.md")
		}
	}
	if ctx.Err() != nil {
		return
	}
	who := "the node's user"
	if user != "" {
		who = "user " + strconv.Quote(user)
	}
	report := func(g probeGroup, sev Severity, why string) {
		if cmds := refused[g]; len(cmds) > 0 {
			in.add(sev, "acl", "-"+strings.Join(cmds, " -"), "%s may not run %s: %s", who, strings.ToUpper(strings.Join(cmds, ", ")), why)
		}
	}
	if keys := refused[keyAccess]; len(keys) > 0 {
		in.add(Unfit, "acl", keys[0], "%s may not access the set's keys (prefix %q): every lock round fails on this node; give it ~%s*", who, r.set.Keys.Prefix, r.set.Keys.Prefix)
	}
	report(scripts, Unfit, "every lock round fails on this node")
	report(loading, Note, "scripts are sent in full with EVAL instead of EVALSHA")
	report(notices, Risky, "waiters are not woken by releases and wait out their backoff; grant them, or use WithoutNotifications")
}

// aclByErrors sends the probes that change nothing (EVAL of a script that
// only reads, EVALSHA of a digest no script has, SCRIPT LOAD of a script
// that does nothing, PUBLISH of a message no waiter acts on) and records
// the refused ones.
func (r *Redlock) aclByErrors(ctx context.Context, c *redis.Client, refused map[probeGroup][]string) {
	k := r.checkKey()
	try := func(g probeGroup, args ...any) {
		err := c.Do(ctx, args...).Err()
		switch {
		case !denied(err):
		case strings.Contains(err.Error(), "access one of the keys"):
			refused[keyAccess] = []string{"~" + k}
		case strings.Contains(err.Error(), "executing the script"):
			refused[g] = append(refused[g], "exists") // the one command the script calls
		default:
			refused[g] = append(refused[g], name(args))
		}
	}
	try(scripts, "EVAL", "return redis.call('EXISTS', KEYS[1])", 1, k)
	try(scripts, "EVALSHA", strings.Repeat("0", 40), 1, k)
	try(loading, "SCRIPT", "LOAD", "return 1")
	if r.set.Notify {
		try(notices, "PUBLISH", notify.Channel(k), "quorumlock:check")
	}
}

// name returns a command's name in lower case, as ACL rules spell it.
func name(args []any) string {
	n := strings.ToLower(args[0].(string))
	if n == "script" {
		return "script|load"
	}
	return n
}
