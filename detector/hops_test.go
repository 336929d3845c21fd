package detector

import (
	"net/netip"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/decode"
)

// TestSecondHopWindow follows one request and its copy on the wire at
// several delays: a copy within hopWindow is set aside wherever the
// generations of the hop memory turn over, and one past it is judged,
// though its first hop may still be in the older generation.
func TestSecondHopWindow(t *testing.T) {
	client := netip.MustParseAddrPort("10.0.0.1:40000")
	proxy := netip.MustParseAddrPort("10.0.0.2:8080")  // the first hop's server, and the second's client
	natted := netip.MustParseAddrPort("10.0.0.3:8080") // the pod behind a Service address
	server := netip.MustParseAddrPort("10.0.0.4:8080") // the proxy's upstream
	proxySide := netip.MustParseAddrPort("10.0.0.2:51000")
	request := func(id uint64, from, to netip.AddrPort) *exchange {
		return &exchange{conn: decode.Conn{ID: id, Client: from, Server: to}, method: "POST", path: "/mcp",
			endpoint: "mcp.example/mcp", reqSession: "S1", hasReqSession: true,
			msgs: []decode.Message{{Type: decode.MsgRequest, ID: "7", Method: "tools/call", ParamsHash: "ab"}}}
	}
	for _, tc := range []struct {
		name string
		// lead: requests of other sessions before the first hop, at
		// this spacing, to turn the generations over.
		lead   time.Duration
		delay  time.Duration
		second func() *exchange
		aside  bool
	}{
		{"proxy hop at once", 0, time.Millisecond, func() *exchange { return request(2, proxySide, server) }, true},
		{"proxy hop just within the window", 0, hopWindow, func() *exchange { return request(2, proxySide, server) }, true},
		{"proxy hop across a generation", 700 * time.Millisecond, 900 * time.Millisecond, func() *exchange { return request(2, proxySide, server) }, true},
		{"proxy hop past the window", 0, hopWindow + time.Millisecond, func() *exchange { return request(2, proxySide, server) }, false},
		{"proxy hop past the window, first in the older generation", 300 * time.Millisecond, 1050 * time.Millisecond, func() *exchange { return request(2, proxySide, server) }, false},
		{"NAT copy across a generation", 900 * time.Millisecond, 200 * time.Millisecond, func() *exchange { return request(3, client, natted) }, true},
		{"NAT copy past the window", 400 * time.Millisecond, 1200 * time.Millisecond, func() *exchange { return request(3, client, natted) }, false},
		{"the same client again (a retry)", 0, time.Millisecond, func() *exchange { return request(4, client, proxy) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := New(Config{}, &recorder{})
			at := time.Unix(1000, 0)
			observe := func(ex *exchange) bool {
				return d.secondHop(ex, &decode.Observation{Time: at})
			}
			if tc.lead > 0 {
				for i := range 3 {
					other := request(100+uint64(i), netip.AddrPortFrom(netip.MustParseAddr("10.0.9.9"), uint16(i+1)), proxy)
					other.reqSession = "other"
					if observe(other) {
						t.Fatal("a request of another session was taken for a hop")
					}
					at = at.Add(tc.lead)
				}
			}
			if observe(request(1, client, proxy)) {
				t.Fatal("the first hop was set aside")
			}
			at = at.Add(tc.delay)
			if got := observe(tc.second()); got != tc.aside {
				t.Errorf("second request %v after the first: set aside %v, want %v", tc.delay, got, tc.aside)
			}
		})
	}
}

// TestCallsSetAsideForgotten: a party whose tools/call was set aside counts
// as such for twice LinkWindow before a broken call, and when the parties
// are forgotten at maxHopRequests, every party counts as set aside for as
// long: re-issues lost, never judged on a habit the detector forgot.
func TestCallsSetAsideForgotten(t *testing.T) {
	d := New(Config{}, &recorder{})
	window := 2 * d.cfg.LinkWindow
	t0 := time.Unix(1000, 0)
	call := func(client string, at time.Time) (*exchange, *decode.Message) {
		ex := &exchange{conn: decode.Conn{Client: netip.MustParseAddrPort(client)}, endpoint: "shop.test/mcp", start: at,
			msgs: []decode.Message{{Type: decode.MsgRequest, ID: "7", Method: "tools/call", Tool: "poll"}}}
		return ex, &ex.msgs[0]
	}
	d.setAside(func() *exchange { ex, _ := call("10.0.0.3:5000", t0); return ex }(), true)
	for _, tc := range []struct {
		client string
		at     time.Time
		want   bool
	}{
		{"10.0.0.3:5001", t0.Add(time.Minute), true},           // the same party, another port
		{"10.0.0.3:5001", t0.Add(window + time.Second), false}, // past the window
		{"10.0.0.4:5000", t0.Add(time.Minute), false},          // another party
	} {
		ex, m := call(tc.client, tc.at)
		if got := d.callsSetAside(ex, m, tc.at.Add(-window)); got != tc.want {
			t.Errorf("%s at +%v: %v, want %v", tc.client, tc.at.Sub(t0), got, tc.want)
		}
	}
	// Fill the memory: the next new party forgets them all.
	for i := range maxHopRequests {
		ex, _ := call(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), 1).String(), t0.Add(time.Second))
		d.setAside(ex, true)
	}
	if d.stats.LimitsHit["maxHopRequests"] == 0 {
		t.Fatal("no limit hit")
	}
	ex, m := call("10.0.0.4:5000", t0.Add(time.Minute))
	if !d.callsSetAside(ex, m, ex.start.Add(-window)) {
		t.Error("after the memory was forgotten, another party's call does not count as set aside")
	}
	ex, m = call("10.0.0.4:5000", t0.Add(time.Second+window+time.Second))
	if d.callsSetAside(ex, m, ex.start.Add(-window)) {
		t.Error("twice LinkWindow after the memory was forgotten, a party never set aside still counts as set aside")
	}
}
