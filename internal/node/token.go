package node

import "crypto/rand"

// NewToken returns a fresh random token: 26 base32 characters carrying 130
// bits from crypto/rand, so no two acquisitions ever share a value.
func NewToken() string { return rand.Text() }
