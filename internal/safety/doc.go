// Package safety holds the library's fault-injection and safety tests; it has no non-test code.
package safety
