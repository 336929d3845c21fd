package decode

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestPeekJSONRPC(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		isJSON bool
		batch  bool
		want   []Message // hashes are checked separately
	}{
		{name: "request", in: `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, isJSON: true,
			want: []Message{{Type: MsgRequest, ID: "1", Method: "tools/list"}}},
		{name: "string id kept as JSON", in: `{"jsonrpc":"2.0","id":"a b","method":"ping"}`, isJSON: true,
			want: []Message{{Type: MsgRequest, ID: `"a b"`, Method: "ping"}}},
		{name: "notification", in: `{"jsonrpc":"2.0","method":"notifications/initialized"}`, isJSON: true,
			want: []Message{{Type: MsgNotification, Method: "notifications/initialized"}}},
		{name: "response", in: `{"jsonrpc":"2.0","id":3,"result":{}}`, isJSON: true,
			want: []Message{{Type: MsgResponse, ID: "3"}}},
		{name: "null result is a response", in: `{"jsonrpc":"2.0","id":3,"result":null}`, isJSON: true,
			want: []Message{{Type: MsgResponse, ID: "3"}}},
		{name: "error", in: `{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Session not found"}}`, isJSON: true,
			want: []Message{{Type: MsgError, ID: "null", ErrorCode: -32001, UnknownSession: true}}},
		{name: "error null beside a result is a response", in: `{"jsonrpc":"2.0","id":3,"result":{"content":[]},"error":null}`,
			isJSON: true, want: []Message{{Type: MsgResponse, ID: "3"}}},
		{name: "escaped string id is the id it spells", in: `{"jsonrpc":"2.0","id":"r-\u00e9\/x","method":"ping"}`,
			isJSON: true, want: []Message{{Type: MsgRequest, ID: "\"r-\u00e9/x\"", Method: "ping"}}},
		{name: "unescaped string id", in: "{\"jsonrpc\":\"2.0\",\"id\":\"r-\u00e9/x\",\"result\":{}}",
			isJSON: true, want: []Message{{Type: MsgResponse, ID: "\"r-\u00e9/x\""}}},
		{name: "lone surrogate id kept as written", in: `{"jsonrpc":"2.0","id":"\ud800","method":"ping"}`,
			isJSON: true, want: []Message{{Type: MsgRequest, ID: `"\ud800"`, Method: "ping"}}},
		{name: "escaped progress token", in: `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t\u0031","progress":1}}`,
			isJSON: true, want: []Message{{Type: MsgNotification, Method: "notifications/progress", ProgressToken: `"t1"`, Progress: 1, HasProgress: true}}},
		{name: "wrong version", in: `{"jsonrpc":"1.0","id":1,"method":"x"}`, isJSON: true, want: []Message{{Type: MsgInvalid, ID: "1"}}},
		{name: "no jsonrpc member", in: `{"status":"ok"}`, isJSON: true, want: []Message{{Type: MsgInvalid}}},
		{name: "neither method nor result", in: `{"jsonrpc":"2.0","id":1}`, isJSON: true, want: []Message{{Type: MsgInvalid, ID: "1"}}},
		{name: "method of wrong type", in: `{"jsonrpc":"2.0","id":1,"method":5}`, isJSON: true, want: []Message{{Type: MsgInvalid, ID: "1"}}},
		{name: "not JSON", in: `<html>`, isJSON: false},
		{name: "broken JSON", in: `{"jsonrpc":"2.0",`, isJSON: false},
		{name: "scalar", in: `42`, isJSON: false},
		{name: "empty batch", in: `[]`, isJSON: true, batch: true, want: []Message{{Type: MsgInvalid}}},
		{name: "batch", in: ` [{"jsonrpc":"2.0","id":1,"method":"a"}, {"jsonrpc":"2.0","method":"b"}, 7]`, isJSON: true, batch: true,
			want: []Message{{Type: MsgRequest, ID: "1", Method: "a"}, {Type: MsgNotification, Method: "b"}, {Type: MsgInvalid}}},
		{name: "tools/call", in: `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"secret":"x"},"_meta":{"progressToken":"tok"}}}`,
			isJSON: true, want: []Message{{Type: MsgRequest, ID: "2", Method: "tools/call", Tool: "echo", ProgressToken: `"tok"`}}},
		{name: "progress", in: `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":7,"progress":2.5,"total":10}}`,
			isJSON: true, want: []Message{{Type: MsgNotification, Method: "notifications/progress", ProgressToken: "7", Progress: 2.5, HasProgress: true, ProgressTotal: 10, HasTotal: true}}},
		{name: "cancelled", in: `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId": "r-1" ,"reason":"timeout"}}`,
			isJSON: true, want: []Message{{Type: MsgNotification, Method: "notifications/cancelled", CancelledID: `"r-1"`}}},
		{name: "initialize request", in: `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-03-26"}}`,
			isJSON: true, want: []Message{{Type: MsgRequest, ID: "0", Method: "initialize", ProtocolVersion: "2025-03-26"}}},
		{name: "initialize result", in: `{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25","serverInfo":{}}}`,
			isJSON: true, want: []Message{{Type: MsgResponse, ID: "0", ProtocolVersion: "2025-11-25"}}},
	}
	var pk Peeker
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msgs, batch, isJSON := pk.PeekJSONRPC([]byte(tt.in))
			if isJSON != tt.isJSON || batch != tt.batch {
				t.Fatalf("isJSON=%v batch=%v, want %v %v", isJSON, batch, tt.isJSON, tt.batch)
			}
			if len(msgs) != len(tt.want) {
				t.Fatalf("got %d messages %+v, want %d", len(msgs), msgs, len(tt.want))
			}
			for i, m := range msgs {
				if m.Type == MsgRequest && (m.ParamsHash == "") != !hasParams(tt.in, i) {
					t.Errorf("message %d: ParamsHash %q", i, m.ParamsHash)
				}
				if m.Type == MsgNotification && m.ParamsHash != "" {
					t.Errorf("message %d: ParamsHash %q", i, m.ParamsHash)
				}
				if (m.Type == MsgResponse) != (m.ResultHash != "") {
					t.Errorf("message %d: ResultHash %q for %s", i, m.ResultHash, m.Type)
				}
				m.ParamsHash, m.ResultHash = "", ""
				if m != tt.want[i] {
					t.Errorf("message %d:\n got %+v\nwant %+v", i, m, tt.want[i])
				}
			}
		})
	}
}

// hasParams says whether message i of a test input has params.
func hasParams(in string, i int) bool {
	var v any
	if json.Unmarshal([]byte(in), &v) != nil {
		return false
	}
	if arr, ok := v.([]any); ok {
		v = arr[i]
	}
	obj, _ := v.(map[string]any)
	_, ok := obj["params"]
	return ok
}

func TestParamsHashCanonical(t *testing.T) {
	const tmpl = `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":%s}`
	tests := []struct {
		name string
		a, b string
		same bool
	}{
		{name: "reordered keys", a: `{"name":"t","arguments":{"x":1,"y":[1,{"b":2,"a":1}]}}`,
			b: `{ "arguments" : { "y" : [ 1 , { "a" : 1 , "b" : 2 } ] , "x" : 1 } , "name" : "t" }`, same: true},
		{name: "escaped spelling", a: `{"name":"\u0041\/"}`, b: `{"name":"A/"}`, same: true},
		{name: "escaped key sorts by value", a: `{"\u0062":1,"a":2}`, b: `{"a":2,"b":1}`, same: true},
		{name: "different value", a: `{"name":"t","arguments":{"x":1}}`, b: `{"name":"t","arguments":{"x":2}}`, same: false},
		{name: "array order matters", a: `[1,2]`, b: `[2,1]`, same: false},
	}
	var pk Peeker
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ma, _, _ := pk.PeekJSONRPC([]byte(fmt.Sprintf(tmpl, 1, tt.a)))
			mb, _, _ := pk.PeekJSONRPC([]byte(fmt.Sprintf(tmpl, 2, tt.b)))
			if len(ma) != 1 || len(mb) != 1 || ma[0].ParamsHash == "" {
				t.Fatalf("peek failed: %+v %+v", ma, mb)
			}
			if (ma[0].ParamsHash == mb[0].ParamsHash) != tt.same {
				t.Errorf("hash equality = %v, want %v", ma[0].ParamsHash == mb[0].ParamsHash, tt.same)
			}
		})
	}
}

func TestCanonicalJSON(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"b":1,"a":{"d":[3,{"z":0,"y":1}],"c":null}}`, `{"a":{"c":null,"d":[3,{"y":1,"z":0}]},"b":1}`},
		{" [ true , false , -1.5e3 ] ", `[true,false,-1.5e3]`},
		{`"tab\there\u00e9"`, "\"tab\\there\u00e9\""},
		{`{}`, `{}`},
		{`{"a":"\u0001"}`, `{"a":"\u0001"}`},
	}
	for _, tt := range tests {
		got, err := CanonicalJSON(nil, []byte(tt.in))
		if err != nil || string(got) != tt.want {
			t.Errorf("CanonicalJSON(%s) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{`{"a":}`, `[1,`, `{"a" 1}`, `tru`, `"open`, `{"a":1}x`} {
		if _, err := CanonicalJSON(nil, []byte(bad)); err == nil {
			t.Errorf("CanonicalJSON(%s): no error", bad)
		}
	}
}

// TestPeekKeepsNoValues makes sure a tool argument never survives in a
// Message: only its hash does.
func TestPeekKeepsNoValues(t *testing.T) {
	var pk Peeker
	msgs, _, _ := pk.PeekJSONRPC([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"password":"hunter2"}}}`))
	s := fmt.Sprintf("%+v", msgs)
	if strings.Contains(s, "hunter2") {
		t.Fatalf("argument value kept: %s", s)
	}
	canon := `{"arguments":{"password":"hunter2"},"name":"t"}`
	sum := sha256.Sum256([]byte(canon))
	if msgs[0].ParamsHash != hex.EncodeToString(sum[:]) {
		t.Errorf("ParamsHash %s is not the SHA-256 of %s", msgs[0].ParamsHash, canon)
	}
}

// FuzzJSONRPC checks the hand-written scanner against encoding/json: the
// same inputs are JSON, and the canonical form means the same value and is a
// fixed point. Each input is peeked with tool arguments kept and not (see
// checkArguments).
func FuzzJSONRPC(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","b":[1,2.5e3,{"d":null,"c":true}]}}`))
	f.Add([]byte(`[{"jsonrpc":"2.0","id":"\u00e9","result":{"z":"\"","a":-0}}, 3]`))
	f.Add([]byte(`{"a":1,"a":2}`))
	f.Add([]byte(`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{ "q" : "a \" b\\" , "n" : [ 1 , 2 ] , "u" : "é😀é" }}}]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var pk Peeker
		msgs, _, isJSON := pk.PeekJSONRPC(b)
		checkArguments(t, b, msgs)
		trimmed := bytes.TrimLeft(b, " \t\r\n")
		structured := len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '[')
		if valid := json.Valid(b); isJSON != (valid && structured) {
			t.Fatalf("PeekJSONRPC isJSON=%v, json.Valid=%v", isJSON, valid)
		}
		canon, err := pk.Canonical(nil, b)
		if (err == nil) != json.Valid(b) {
			t.Fatalf("Canonical error %v, json.Valid=%v", err, json.Valid(b))
		}
		if err != nil {
			return
		}
		again, err := pk.Canonical(nil, canon)
		if err != nil || !bytes.Equal(again, canon) {
			t.Fatalf("canonical form is not a fixed point:\n%s\n%s (%v)", canon, again, err)
		}
		// encoding/json decodes every invalid UTF-8 key to U+FFFD, so
		// distinct keys collide and the last one wins; the canonical form
		// keeps them distinct and sorts them by their bytes, which changes
		// which one is last. Such input has no encoding/json value to
		// compare with.
		if utf8.Valid(b) && !reflect.DeepEqual(decodeAny(t, b), decodeAny(t, canon)) {
			t.Fatalf("canonical form changed the value:\n%s\n%s", b, canon)
		}
	})
}

// checkArguments holds Message.Arguments to encoding/json: off (msgs, from
// the zero Peeker) nothing is kept; on, each tools/call request keeps
// json.Compact of its params.arguments, cut at the limit on a rune boundary,
// and nothing else in any message differs.
func checkArguments(t *testing.T, b []byte, msgs []Message) {
	t.Helper()
	for i, m := range msgs {
		if m.Arguments != "" || m.ArgumentsTruncated {
			t.Fatalf("message %d: Arguments %q kept with KeepToolArguments off", i, m.Arguments)
		}
	}
	if msgs == nil {
		return
	}
	var elems []json.RawMessage
	if json.Unmarshal(b, &elems) != nil {
		elems = []json.RawMessage{b}
	}
	for _, limit := range []int{0, 16} {
		pk := Peeker{KeepToolArguments: true, MaxArgumentBytes: limit}
		on, _, _ := pk.PeekJSONRPC(b)
		if len(on) != len(msgs) {
			t.Fatalf("limit %d: %d messages kept, %d off", limit, len(on), len(msgs))
		}
		if limit == 0 {
			limit = DefaultMaxArgumentBytes
		}
		for i, m := range on {
			want := "" // an empty batch gives one message and no element
			if i < len(elems) {
				want = refArguments(elems[i])
			}
			switch {
			case len(want) <= limit:
				if m.Arguments != want || m.ArgumentsTruncated {
					t.Fatalf("limit %d message %d: Arguments %q truncated=%v, want %q", limit, i, m.Arguments, m.ArgumentsTruncated, want)
				}
			case !m.ArgumentsTruncated || !strings.HasPrefix(want, m.Arguments) || len(m.Arguments) > limit ||
				len(m.Arguments) <= limit-utf8.UTFMax || (utf8.ValidString(want) && !utf8.ValidString(m.Arguments)):
				t.Fatalf("limit %d message %d: Arguments %q truncated=%v, want a cut of %q", limit, i, m.Arguments, m.ArgumentsTruncated, want)
			}
			m.Arguments, m.ArgumentsTruncated = "", false
			if m != msgs[i] {
				t.Fatalf("limit %d message %d differs beyond the arguments:\n on %+v\noff %+v", limit, i, m, msgs[i])
			}
		}
	}
}

// refArguments is what Message.Arguments should hold for one message,
// found with encoding/json: "" unless it is a tools/call request with
// params.arguments.
func refArguments(raw []byte) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return ""
	}
	var version, method string
	if json.Unmarshal(m["jsonrpc"], &version) != nil || version != "2.0" ||
		json.Unmarshal(m["method"], &method) != nil || method != "tools/call" || m["id"] == nil {
		return ""
	}
	var params map[string]json.RawMessage
	if json.Unmarshal(m["params"], &params) != nil || params["arguments"] == nil {
		return ""
	}
	var out bytes.Buffer
	if json.Compact(&out, params["arguments"]) != nil {
		return ""
	}
	return out.String()
}

func decodeAny(t *testing.T, b []byte) any {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

// TestCompactJSONSmallInts checks that shared small-number strings are
// only used for the exact spellings they stand for.
func TestCompactJSONSmallInts(t *testing.T) {
	for _, in := range []string{"0", "7", "42", "999", "1000", "007", "-1", "1.5", "1e2", `"1"`, " 12 "} {
		want := in
		if in == " 12 " {
			want = "12"
		}
		if got := compactJSON([]byte(in)); got != want {
			t.Errorf("compactJSON(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestPlainString checks the word-at-a-time scan against a byte loop, with
// each kind of stop byte at every position of the words around it.
func TestPlainString(t *testing.T) {
	slow := func(b []byte, i int) int {
		for i < len(b) && b[i] != '"' && b[i] != '\\' && b[i] >= 0x20 {
			i++
		}
		return i
	}
	for _, stop := range []byte{'"', '\\', 0x00, 0x1f, '\n'} {
		for n := 0; n <= 24; n++ {
			for at := 0; at <= n; at++ {
				b := make([]byte, n)
				for i := range b {
					b[i] = "a\x7f\x80\xff !#[]"[i%9] // plain bytes, ASCII and not
				}
				if at < n {
					b[at] = stop
				}
				for start := 0; start <= n; start++ {
					if got, want := plainString(b, start), slow(b, start); got != want {
						t.Fatalf("stop %q at %d of %d from %d: %d, want %d", stop, at, n, start, got, want)
					}
				}
			}
		}
	}
}

// TestPlainStringRandom checks plainString against a byte loop on random
// words full of stop bytes and their neighbours, several to a word, where a
// borrow from one byte's test could mark the next.
func TestPlainStringRandom(t *testing.T) {
	alphabet := []byte{0x00, 0x01, 0x1f, 0x20, 0x21, '"' - 1, '"', '"' + 1, '\\' - 1, '\\', '\\' + 1, 0x7f, 0x80, 0xa2, 0xdc, 0xff, 'a'}
	rng := rand.New(rand.NewPCG(3, 4))
	b := make([]byte, 40)
	for n := 0; n < 200000; n++ {
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
			if rng.IntN(3) > 0 {
				b[i] = 'a' // long plain runs as well
			}
		}
		start := rng.IntN(len(b) + 1)
		want := start
		for want < len(b) && b[want] != '"' && b[want] != '\\' && b[want] >= 0x20 {
			want++
		}
		if got := plainString(b, start); got != want {
			t.Fatalf("%q from %d: %d, want %d", b, start, got, want)
		}
	}
}

// TestHexEncode holds the table-driven hex spelling to encoding/hex for
// every byte value and the lengths the decoder uses.
func TestHexEncode(t *testing.T) {
	src := make([]byte, 256)
	for i := range src {
		src[i] = byte(i)
	}
	for _, n := range []int{0, 1, 8, 32, 256} {
		dst := make([]byte, 2*n)
		hexEncode(dst, src[256-n:])
		if want := hex.EncodeToString(src[256-n:]); string(dst) != want {
			t.Fatalf("hexEncode of %d bytes: %s, want %s", n, dst, want)
		}
	}
	sum := sha256.Sum256([]byte("x"))
	if got, want := hexDigest(sum), hex.EncodeToString(sum[:]); got != want {
		t.Fatalf("hexDigest %s, want %s", got, want)
	}
	var buf [16]byte
	if got := hex64(&buf, 0x0123456789abcdef); got != "0123456789abcdef" {
		t.Fatalf("hex64 %s", got)
	}
}

// TestCallIdentityIgnoresMeta: the same tools/call sent again with a new
// progress token or trace context is the same call; other arguments are not.
func TestCallIdentityIgnoresMeta(t *testing.T) {
	hash := func(body string) string {
		var pk Peeker
		msgs, _, ok := pk.PeekJSONRPC([]byte(body))
		if !ok || len(msgs) != 1 {
			t.Fatalf("not one message: %s", body)
		}
		return msgs[0].ParamsHash
	}
	base := hash(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"order":"o-1","cents":500}}}`)
	same := []string{
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"_meta":{"progressToken":7},"name":"charge_card","arguments":{"cents":500,"order":"o-1"}}}`,
		`{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"arguments":{"order":"o-1","cents":500},"name":"charge_card","_meta":{"traceparent":"00-abc-def-01","progressToken":"p-9"}}}`,
	}
	for _, b := range same {
		if h := hash(b); h != base {
			t.Errorf("%s: hash %s, want that of the call without _meta %s", b, h, base)
		}
	}
	other := []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"order":"o-2","cents":500}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"order":"o-1","cents":500,"_meta":{"k":1}}}}`,
	}
	for _, b := range other {
		if h := hash(b); h == base {
			t.Errorf("%s: same hash as a different call", b)
		}
	}
}

func TestToolAnnotationsFromToolsList(t *testing.T) {
	var pk Peeker
	body := `{"jsonrpc":"2.0","id":4,"result":{"tools":[
		{"name":"charge_card","annotations":{"destructiveHint":true}},
		{"name":"get_order","annotations":{"readOnlyHint":true}},
		{"name":"set_flag","annotations":{"readOnlyHint":false,"idempotentHint":true}},
		{"name":"plain","inputSchema":{"type":"object"}}]}}`
	msgs, _, ok := pk.PeekJSONRPC([]byte(body))
	if !ok || len(msgs) != 1 {
		t.Fatal("not one message")
	}
	if got, want := msgs[0].Tools, "dcharge_card\nrget_order\nrset_flag\n-plain"; got != want {
		t.Errorf("Tools = %q, want %q", got, want)
	}
}

// TestSessionlessMeta: under 2026-07-28 every request names its client and
// revision in params._meta; a progress token there is no part of the call.
func TestSessionlessMeta(t *testing.T) {
	var pk Peeker
	call := func(token string) Message {
		msgs, _, _ := pk.PeekJSONRPC([]byte(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"_meta":{` +
			`"io.modelcontextprotocol/clientInfo":{"name":"shop","version":"2.1"},"io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
			`"progressToken":"` + token + `"},"name":"charge_card","arguments":{"order":"o-1"}}}`))
		if len(msgs) != 1 {
			t.Fatalf("%d messages", len(msgs))
		}
		return msgs[0]
	}
	m := call("t1")
	if m.ClientInfo != "shop/2.1" || m.ProtocolVersion != "2026-07-28" || m.Tool != "charge_card" || m.ProgressToken != `"t1"` {
		t.Errorf("got clientInfo %q, version %q, tool %q, token %s", m.ClientInfo, m.ProtocolVersion, m.Tool, m.ProgressToken)
	}
	if again := call("t2"); again.ParamsHash != m.ParamsHash {
		t.Error("a new progress token changed the call's identity")
	}
}

func TestInitializeClientInfo(t *testing.T) {
	var pk Peeker
	msgs, _, _ := pk.PeekJSONRPC([]byte(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"billing-agent","version":"1.4.2"}}}`))
	if len(msgs) != 1 || msgs[0].ClientInfo != "billing-agent/1.4.2" || msgs[0].ProtocolVersion != "2025-11-25" {
		t.Fatalf("got %+v", msgs)
	}
}

func TestCreatesTask(t *testing.T) {
	var pk Peeker
	for body, want := range map[string]bool{
		`{"jsonrpc":"2.0","id":3,"result":{"task":{"taskId":"t-1","status":"working","createdAt":"x","lastUpdatedAt":"x","ttl":null}}}`: true,
		`{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"\"taskId\" is a word here"}]}}`:                            false,
	} {
		msgs, _, _ := pk.PeekJSONRPC([]byte(body))
		if len(msgs) != 1 || msgs[0].CreatesTask != want {
			t.Errorf("%s: CreatesTask %v, want %v", body, !want, want)
		}
	}
}

func TestToolError(t *testing.T) {
	var pk Peeker
	for body, want := range map[string]bool{
		`{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"card declined"}],"isError":true}}`:    true,
		`{"jsonrpc":"2.0","id":3,"result":{"isError" : false,"content":[]}}`:                                       false,
		`{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"\"isError\":true is a word here"}]}}`: false,
		`{"jsonrpc":"2.0","id":3,"result":{"structuredContent":{"isError":true},"content":[]}}`:                    false,
	} {
		msgs, _, _ := pk.PeekJSONRPC([]byte(body))
		if len(msgs) != 1 || msgs[0].ToolError != want {
			t.Errorf("%s: ToolError %v, want %v", body, !want, want)
		}
	}
}

func TestUnknownSessionErrors(t *testing.T) {
	var pk Peeker
	for msg, want := range map[string]bool{
		"Session not found":                              true,
		"Bad Request: No valid session ID provided":      true,
		"Invalid session ID":                             true,
		"session expired":                                true,
		"Bad Request: Mcp-Session-Id header is required": false,
		"Unknown tool: charge":                           false,
		"Internal error":                                 false,
	} {
		msgs, _, _ := pk.PeekJSONRPC([]byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":` + fmt.Sprintf("%q", msg) + `}}`))
		if len(msgs) != 1 || msgs[0].UnknownSession != want {
			t.Errorf("%q: UnknownSession %v, want %v", msg, !want, want)
		}
	}
}
