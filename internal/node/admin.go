package node

import (
	_ "embed"
	"strconv"
	"strings"
	"time"
)

// The scripts of an operator's calls (inspection and forced unlock), from
// lua/; each file documents its keys, arguments and reply.
var (
	//go:embed lua/peek.lua
	peekSrc string
	//go:embed lua/scan.lua
	scanSrc string
	//go:embed lua/advance.lua
	advanceSrc string
	//go:embed lua/evict.lua
	evictBody string

	// PeekScript reads one key of any type (peek.lua).
	PeekScript = NewScript("peek", peekSrc)
	// ScanScript makes one step of a SCAN by pattern (scan.lua).
	ScanScript = NewScript("scan", scanSrc)
	// AdvanceScript raises the fencing counter (advance.lua).
	AdvanceScript = NewScript("advance", advanceSrc)
	// EvictScript removes a lock key whatever its token (evict.lua).
	EvictScript = NewScript("evict", withLib(evictBody))
)

// Peek is what the peek script found in one key on one node.
type Peek struct {
	Type   string            // as TYPE names it; "none" when missing
	TTL    time.Duration     // as PTTL reports it: -2ms missing, -1ms no TTL
	Now    time.Time         // the node's clock, to the millisecond
	Value  string            // a string's value
	Fields map[string]string // a hash's fields
}

// ParsePeek reads the peek script's reply.
func ParsePeek(v any) (Peek, error) {
	r, ok := v.([]any)
	if !ok || len(r) != 4 {
		return Peek{}, unexpected("peek", v)
	}
	kind, ok1 := r[0].(string)
	pttl, ok2 := r[1].(int64)
	now, ok3 := r[2].(int64)
	if !ok1 || !ok2 || !ok3 || pttl < -2 {
		return Peek{}, unexpected("peek", v)
	}
	p := Peek{Type: kind, TTL: time.Duration(pttl) * time.Millisecond, Now: time.UnixMilli(now)}
	switch value := r[3].(type) {
	case string:
		if kind == "string" {
			p.Value = value
		}
	case []any:
		if kind != "hash" || len(value)%2 != 0 {
			return Peek{}, unexpected("peek", v)
		}
		p.Fields = make(map[string]string, len(value)/2)
		for i := 0; i < len(value); i += 2 {
			field, ok1 := value[i].(string)
			val, ok2 := value[i+1].(string)
			if !ok1 || !ok2 {
				return Peek{}, unexpected("peek", v)
			}
			p.Fields[field] = val
		}
	default:
		return Peek{}, unexpected("peek", v)
	}
	return p, nil
}

// ParseScan reads the scan script's reply: the next cursor ("0": done) and
// the keys found.
func ParseScan(v any) (string, []string, error) {
	r, ok := v.([]any)
	if !ok || len(r) < 1 {
		return "", nil, unexpected("scan", v)
	}
	cursor, ok := r[0].(string)
	if _, err := strconv.ParseUint(cursor, 10, 64); !ok || err != nil {
		return "", nil, unexpected("scan", v)
	}
	keys := make([]string, 0, len(r)-1)
	for _, x := range r[1:] {
		key, ok := x.(string)
		if !ok {
			return "", nil, unexpected("scan", v)
		}
		keys = append(keys, key)
	}
	return cursor, keys, nil
}

// ParseCounter reads the advance script's reply: the counter, at least 0.
func ParseCounter(v any) (uint64, error) {
	n, ok := v.(int64)
	if !ok || n < 0 {
		return 0, unexpected("advance", v)
	}
	return uint64(n), nil
}

// Eviction is what the evict script did with one key.
type Eviction int8

const (
	OtherType Eviction = -1 // the key is of another type: not a lock's, left alone
	Absent    Eviction = 0  // the key was missing
	Evicted   Eviction = 1  // the key was removed
)

// ParseEviction reads the evict script's reply.
func ParseEviction(v any) (Eviction, error) {
	n, ok := v.(int64)
	if !ok || n < -1 || n > 1 {
		return 0, unexpected("evict", v)
	}
	return Eviction(n), nil
}

// ParseMetadata splits the value of a Meta lock's metadata record
// (metaset.lua) into the token it belongs to and the metadata; false when
// it is not a record.
func ParseMetadata(record string) (token, metadata string, ok bool) {
	token, metadata, ok = strings.Cut(record, "\n")
	return token, metadata, ok && token != ""
}
