package redistest

import (
	"path/filepath"
	"strconv"
)

// Config describes how the servers of one [Start] call are run. Build it with
// [Option] values; the zero Config is an in-memory server without a password.
type Config struct {
	// AOF turns on the append-only file with "appendfsync always", so every
	// acknowledged write survives [Server.Restart].
	AOF bool

	// Password, if not empty, is set with requirepass. Clients made by
	// [Server.Client] and [Server.Do] authenticate with it.
	Password string

	// ExtraArgs are passed to redis-server after all other arguments, as
	// "--name value" pairs, so they override the defaults. They must not change
	// port, bind, dir, logfile or daemonize, which this package relies on.
	ExtraArgs []string

	cluster bool // cluster-enabled, with its bus on busPort
	busPort int
}

// Option changes a [Config].
type Option func(*Config)

// WithAOF turns on the append-only file (appendonly yes, appendfsync always).
func WithAOF() Option { return func(c *Config) { c.AOF = true } }

// WithPassword makes the servers require password p (requirepass).
func WithPassword(p string) Option { return func(c *Config) { c.Password = p } }

// WithArgs appends args, as "--name value" pairs, to the redis-server command
// line. See [Config.ExtraArgs].
func WithArgs(args ...string) Option {
	return func(c *Config) { c.ExtraArgs = append(c.ExtraArgs, args...) }
}

// newConfig applies opts to a zero Config.
func newConfig(opts []Option) Config {
	var c Config
	for _, opt := range opts {
		opt(&c)
	}
	// Each Server keeps its own copy, unaffected by later changes to the
	// caller's slice.
	c.ExtraArgs = append([]string(nil), c.ExtraArgs...)
	return c
}

// args returns the redis-server command line (without the binary) for a
// server on port with working directory dir. debugCommand adds
// --enable-debug-command local, which redis-server 7 and later understand.
func (c Config) args(port int, dir string, debugCommand bool) []string {
	appendonly := "no"
	if c.AOF {
		appendonly = "yes"
	}
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--protected-mode", "yes",
		"--daemonize", "no",
		"--dir", dir,
		"--logfile", filepath.Join(dir, logFile),
		"--save", "",
		"--appendonly", appendonly,
	}
	if c.AOF {
		args = append(args, "--appendfsync", "always")
	}
	if c.Password != "" {
		args = append(args, "--requirepass", c.Password)
	}
	if c.cluster {
		args = append(args, "--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(c.busPort),
			"--cluster-config-file", clusterConfigFile, "--cluster-node-timeout", clusterNodeTimeout,
			"--repl-diskless-sync-delay", "0") // a replica syncs at once
	}
	if debugCommand {
		args = append(args, "--enable-debug-command", "local")
	}
	return append(args, c.ExtraArgs...)
}
