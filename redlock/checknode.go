package redlock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/timing"
)

// minVersion is the oldest Redis the scripts run on: they call TIME before
// writing, which Redis before 5.0 refuses unless a script opts in to effects
// replication.
const (
	minMajor, minMinor = 5, 0
	timeSamples        = 3
)

// checkClock times TIME round trips and compares the node's clock with
// this process's.
func (r *Redlock) checkClock(ctx context.Context, c *redis.Client, in *inspection) {
	rtts := make([]time.Duration, 0, timeSamples)
	best := time.Duration(-1)
	for range timeSamples {
		start := time.Now()
		t, err := c.Time(ctx).Result()
		rtt := time.Since(start)
		if err != nil {
			if denied(err) {
				in.add(Unfit, "acl", "-time", "TIME refused (%v): the lock scripts call TIME, so every lock round fails on this node", err)
			}
			return
		}
		rtts = append(rtts, rtt)
		if best < 0 || rtt < best {
			best = rtt
			in.ClockOffset = t.Sub(start.Add(rtt / 2))
		}
	}
	slices.Sort(rtts)
	in.RTT = rtts[len(rtts)/2]
	r.judgeLatency(in)
	r.judgeClock(in, best/2)
}

// judgeLatency compares the node's round trip with the per-node timeout:
// WithNodeTimeout, or the largest one the library derives.
func (r *Redlock) judgeLatency(in *inspection) {
	limit := r.set.Timeout(time.Hour)
	switch {
	case in.RTT >= limit:
		in.add(Unfit, "latency", in.RTT.String(), "a round trip of %v reaches the per-node timeout (%v): the node counts as failed in every round", in.RTT, limit)
	case in.RTT*8 > limit:
		in.add(Risky, "latency", in.RTT.String(), "a round trip of %v leaves less than 8 times headroom under the per-node timeout (%v): a latency spike counts the node as failed", in.RTT, limit)
	}
}

// judgeClock compares the node's clock offset, known to within ±uncertain,
// with the drift allowance of a lock of the default TTL.
func (r *Redlock) judgeClock(in *inspection, uncertain time.Duration) {
	allowance := timing.DriftAllowance(timing.DefaultTTL, r.set.DriftFactor)
	if in.ClockOffset.Abs()-uncertain <= allowance {
		return
	}
	dir := "ahead of"
	if in.ClockOffset < 0 {
		dir = "behind"
	}
	in.add(Risky, "TIME", "", "the node's clock is %v %s this process's (±%v): an offset alone does not shorten a lock (keys expire after relative TTLs), but a clock this far off is likely not kept by NTP and may be stepped, which expires keys early; the drift allowance of a %v lock is %v",
		in.ClockOffset.Abs().Round(time.Millisecond), dir, uncertain.Round(time.Microsecond), timing.DefaultTTL, allowance)
}

// checkServer reads INFO: version, mode, role and run_id.
func (r *Redlock) checkServer(ctx context.Context, c *redis.Client, in *inspection) {
	text, err := c.Info(ctx).Result()
	if err != nil {
		if !denied(err) {
			return
		}
		sev, why := Risky, "Check cannot see the node's role, version or identity, and NewFromURLs cannot detect a server listed twice"
		if r.set.Quarantine > 0 {
			sev, why = Unfit, "the restart quarantine needs it: the node never counts toward a majority"
		}
		in.add(sev, "acl", "-info", "INFO refused (%v): %s", err, why)
		return
	}
	info := parseInfo(text)
	in.Version, in.RunID = info["redis_version"], info["run_id"]
	if in.RunID != "" {
		in.runIDs = []runID{{in.RunID, in.shard}}
	}
	judgeVersion(in)
	switch mode := info["redis_mode"]; {
	case mode == "cluster" && in.shard == "":
		in.add(Unfit, "redis_mode", mode, "a Cluster server given as one node answers MOVED for the keys of other slots; give a Cluster as a *redis.ClusterClient, or use independent primaries")
	case mode == "sentinel":
		in.add(Unfit, "redis_mode", mode, "a Sentinel holds no data; give the primary it monitors (redis.NewFailoverClient)")
	}
	if role := info["role"]; role != "" && role != "master" {
		in.add(Unfit, "role", role, "not a primary (replica of %s:%s): it refuses lock writes (READONLY), and a replica of another node is not independent of it; give primaries only",
			info["master_host"], info["master_port"])
	}
	in.info = info
}

// checkSettings reads the memory and persistence settings with CONFIG GET,
// or from INFO when CONFIG is refused or renamed.
func (r *Redlock) checkSettings(ctx context.Context, c *redis.Client, in *inspection) {
	names := []string{"maxmemory", "maxmemory-policy", "appendonly", "appendfsync", "save"}
	conf := make(map[string]string, len(names))
	for _, name := range names {
		vals, err := c.ConfigGet(ctx, name).Result()
		if err != nil {
			if isReplyErr(err) {
				r.settingsFromInfo(in, err)
			}
			return
		}
		conf[name] = vals[name]
	}
	r.checkMemory(in, conf["maxmemory"], conf["maxmemory-policy"])
	r.checkPersistence(in, conf["appendonly"], conf["appendfsync"], conf["save"], fromConfig)
}

// settingsFromInfo judges memory and persistence from the INFO that
// checkServer read, when CONFIG GET failed with err.
func (r *Redlock) settingsFromInfo(in *inspection, err error) {
	if in.info == nil {
		in.add(Note, "CONFIG", "", "CONFIG GET and INFO refused (%v): memory and persistence settings not inspected", err)
		return
	}
	in.add(Note, "CONFIG", "", "CONFIG GET refused (%v): settings read from INFO, which does not show appendfsync or save", err)
	aof := "no"
	if in.info["aof_enabled"] == "1" {
		aof = "yes"
	}
	r.checkMemory(in, in.info["maxmemory"], in.info["maxmemory_policy"])
	r.checkPersistence(in, aof, "", "", fromInfo)
}

// checkMemory judges maxmemory and maxmemory-policy.
func (r *Redlock) checkMemory(in *inspection, maxmemory, policy string) {
	if policy == "" || policy == "noeviction" {
		return
	}
	if maxmemory == "" || maxmemory == "0" {
		in.add(Note, "maxmemory-policy", policy, "evicts once maxmemory is set (it is 0 now); only noeviction is safe for locks")
		return
	}
	why := "evicts any key under memory pressure, lock keys included"
	if strings.HasPrefix(policy, "volatile-") {
		why = "evicts keys that have a TTL first, and every lock key has one: under memory pressure the locks are the first keys to go"
	}
	in.add(Unfit, "maxmemory-policy", policy, "with maxmemory %s, it %s; a node that evicted a lock key grants it to a second owner. Set maxmemory-policy noeviction: a full node then refuses new locks, which counts as a failed node and is safe", maxmemory, why)
}

// settingsSource is where a node's settings were read.
type settingsSource int

const (
	fromConfig settingsSource = iota // CONFIG GET: every setting
	fromInfo                         // INFO, which does not show appendfsync or save
)

// checkPersistence judges whether a restart can forget a granted key, given
// the set's restart quarantine; from says whether appendfsync and save could
// be read.
func (r *Redlock) checkPersistence(in *inspection, appendonly, appendfsync, save string, from settingsSource) {
	known := from == fromConfig
	if appendonly == "yes" && appendfsync == "always" {
		return
	}
	setting, value, loses := "appendonly", appendonly, ""
	switch {
	case appendonly == "yes" && !known:
		setting, value, loses = "appendfsync", "", "appendfsync could not be read; unless it is always, a crash loses the latest grants"
	case appendonly == "yes":
		setting, value, loses = "appendfsync", appendfsync, "a crash loses the grants not yet synced to disk (up to a second or more)"
	case !known:
		loses = "a restart loses every grant since the last RDB snapshot, if there is one"
	case save != "":
		loses = fmt.Sprintf("RDB snapshots only (save %q): a restart loses every grant since the last snapshot", save)
	default:
		loses = `no persistence (save ""): a restart comes back empty`
	}
	if r.set.Quarantine > 0 {
		in.add(Note, setting, value, "%s; safe only while the restart quarantine (%v) is at least the largest TTL in use", loses, r.set.Quarantine)
		return
	}
	in.add(Risky, setting, value, "%s, and a restarted node that forgot a lock can help a second owner to a majority; use appendonly yes with appendfsync always, or give every client of the nodes redlock.WithRestartQuarantine(d), d at least the largest TTL in use", loses)
}

// parseInfo reads INFO's "name:value" lines.
func parseInfo(text string) map[string]string {
	m := map[string]string{}
	for line := range strings.Lines(text) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			m[k] = v
		}
	}
	return m
}

// judgeVersion finds a redis_version older than the scripts need.
func judgeVersion(in *inspection) {
	if major, minor, ok := parseVersion(in.Version); ok && (major < minMajor || major == minMajor && minor < minMinor) {
		in.add(Unfit, "redis_version", in.Version, "the lock scripts need Redis %d.%d or later (they read TIME before writing)", minMajor, minMinor)
	}
}

// parseVersion reads "major.minor[.patch]".
func parseVersion(v string) (major, minor int, ok bool) {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	return major, minor, err1 == nil && err2 == nil
}
