//go:build race

package main

// raceBuild reports that the tests run with the race detector, so the
// binary under test is built with it too.
const raceBuild = true
