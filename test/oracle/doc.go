// Package oracle holds only tests: it checks replaywatch's HTTP decoding of
// the fixture captures against tshark, an implementation we did not write.
// For every fixture both must see, per TCP connection, the same multiset of
// requests (method, target, Mcp-Session-Id, Last-Event-ID) and of responses
// (status, Mcp-Session-Id). The legitimate differences, and why each is one,
// are listed in oracle_test.go next to the code that applies them.
//
//	go test ./test/oracle
//	REPLAYWATCH_ORACLE_GLOB='/tmp/*.pcap' go test ./test/oracle
//
// Without tshark the test skips, unless CI=true, where it fails.
package oracle
