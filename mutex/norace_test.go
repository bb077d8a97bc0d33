//go:build !race

package mutex_test

const raceEnabled = false
