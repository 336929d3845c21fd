package guard_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/replaywatch/replaywatch/guard"
)

// A go-sdk client whose HTTP client goes through the guard: a session the
// server lost is a *guard.SessionLostError naming the calls whose outcome
// is unknown, never a silent retry into a fresh session.
func Example() {
	server := mcp.NewServer(&mcp.Implementation{Name: "shop", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "ping"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "pong"}}}, nil, nil
	})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	defer srv.Close()

	ctx := context.Background()
	transport := &mcp.StreamableClientTransport{
		Endpoint:   srv.URL,
		HTTPClient: &http.Client{Transport: guard.New(http.DefaultTransport)},
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "app", Version: "1"}, nil).Connect(ctx, transport, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ping", Arguments: map[string]any{}})
	var lost *guard.SessionLostError
	switch {
	case errors.As(err, &lost):
		fmt.Println("reconcile", lost.InFlight, "before going on")
	case err != nil:
		fmt.Println(err)
	default:
		fmt.Println(res.Content[0].(*mcp.TextContent).Text)
	}
	// Output: pong
}
