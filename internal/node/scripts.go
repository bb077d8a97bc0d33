package node

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The scripts run with EVALSHA and fall back to EVAL when the node answers
// NOSCRIPT (after a restart or SCRIPT FLUSH); [redis.Script.Run] does both.
var (
	//go:embed lua/acquire.lua
	acquireSrc    string
	acquireScript = redis.NewScript(acquireSrc)

	//go:embed lua/extend.lua
	extendSrc    string
	extendScript = redis.NewScript(extendSrc)

	//go:embed lua/acquire_ext.lua
	acquireExtSrc    string
	acquireExtScript = redis.NewScript(acquireExtSrc)

	//go:embed lua/fence.lua
	fenceSrc    string
	fenceScript = redis.NewScript(fenceSrc)

	//go:embed lua/release.lua
	releaseSrc    string
	releaseScript = redis.NewScript(releaseSrc)
)
