// Package slot computes Redis Cluster hash slots: which slot a key is in,
// and a key naming a slot, so that the library can keep a record in the
// slot of a lock key (a script's keys must share one slot).
package slot

import (
	"strconv"
	"strings"
	"sync"
)

// Count is the number of hash slots of a Redis Cluster.
const Count = 16384

// Tag returns the part of key that Redis Cluster hashes when the key has
// one: what lies between the first "{" and the next "}", if not empty;
// otherwise "".
func Tag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return ""
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return ""
	}
	return key[open+1 : open+1+end]
}

// Of returns key's hash slot, as CLUSTER KEYSLOT does.
func Of(key string) int {
	if tag := Tag(key); tag != "" {
		key = tag
	}
	return int(crc16(key) % Count)
}

// Named returns a short string whose hash slot is slot (0 <= slot < Count):
// "{" + Named(s) + "}" in a key puts it in slot s.
func Named(slot int) string {
	namesOnce.Do(func() {
		left := Count
		for i := 0; left > 0; i++ {
			s := strconv.FormatInt(int64(i), 36)
			if n := crc16(s) % Count; names[n] == "" {
				names[n] = s
				left--
			}
		}
	})
	return names[slot]
}

// names[s] is Named(s), filled at first use (about 170,000 hashes, 2ms).
var (
	names     [Count]string
	namesOnce sync.Once
)

// crc16 is CRC-16/XMODEM, Redis Cluster's key hash.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
