// Package wire is what test/chdbtest and its helper process chdbd say to
// each other: gob-encoded Requests one way, Responses the other, one Response
// per Request and in the same order, after a first Response with ID 0 that
// says whether the chDB session opened.
package wire

// Request asks chdbd to run Query with Database as the current database and
// return its output in Format (a ClickHouse output format name).
type Request struct {
	ID       uint64
	Database string
	Query    string
	Format   string
}

// Response is the output of the Request with the same ID, or chDB's error
// message.
type Response struct {
	ID     uint64
	Output []byte
	Error  string
}
