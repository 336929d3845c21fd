//go:build race

package main

// raceEnabled: this test binary runs under the race detector, and so does
// the product binary the end-to-end tests build (buildBinary).
const raceEnabled = true
