module github.com/replaywatch/replaywatch

go 1.26.8

require (
	github.com/gopacket/gopacket v1.7.0 // indirect
	github.com/modelcontextprotocol/go-sdk v1.8.0 // indirect
	golang.org/x/net v0.55.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/term v0.48.0 // indirect
)
