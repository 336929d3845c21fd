package decode

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// toolCall is a tools/call request whose params.arguments is args, spelled
// as given.
func toolCall(id int, args string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"t","arguments":%s}}`, id, args)
}

type keptArgs struct {
	args      string
	truncated bool
}

func TestPeekArguments(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		limit int // MaxArgumentBytes; 0 is the default
		want  []keptArgs
	}{
		{name: "object", in: toolCall(1, `{"query":"q","limit":10}`),
			want: []keptArgs{{args: `{"query":"q","limit":10}`}}},
		{name: "key order and numbers as sent", in: toolCall(1, `{"b":1e2,"a":-0.50}`),
			want: []keptArgs{{args: `{"b":1e2,"a":-0.50}`}}},
		{name: "nested", in: toolCall(1, `{"a":{"b":{"c":[{"d":null},[true,false]]}},"e":[]}`),
			want: []keptArgs{{args: `{"a":{"b":{"c":[{"d":null},[true,false]]}},"e":[]}`}}},
		{name: "unicode", in: toolCall(1, `{"city":"Zürich","word":"日本語","emoji":"😀"}`),
			want: []keptArgs{{args: `{"city":"Zürich","word":"日本語","emoji":"😀"}`}}},
		{name: "escaped strings stay escaped", in: toolCall(1, `{"q":"say \"hi\"\\ \u00e9\n\/ \ud83d\ude00"}`),
			want: []keptArgs{{args: `{"q":"say \"hi\"\\ \u00e9\n\/ \ud83d\ude00"}`}}},
		{name: "whitespace compacted, not inside strings", in: toolCall(1, "{ \"a\" :\r\n [ 1 ,\t2 ] , \"s\" : \"two  spaces, \\\" quote \" }"),
			want: []keptArgs{{args: `{"a":[1,2],"s":"two  spaces, \" quote "}`}}},
		{name: "backslash before closing quote", in: toolCall(1, `{ "p" : "C:\\" , "q" : " x " }`),
			want: []keptArgs{{args: `{"p":"C:\\","q":" x "}`}}},
		{name: "array", in: toolCall(1, `[1, "two"]`), want: []keptArgs{{args: `[1,"two"]`}}},
		{name: "string", in: toolCall(1, `"text"`), want: []keptArgs{{args: `"text"`}}},
		{name: "null is present", in: toolCall(1, `null`), want: []keptArgs{{args: `null`}}},
		{name: "empty object", in: toolCall(1, `{}`), want: []keptArgs{{args: `{}`}}},
		{name: "arguments before name", in: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{"x":1},"name":"t"}}`,
			want: []keptArgs{{args: `{"x":1}`}}},
		{name: "escaped member name", in: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","\u0061rguments":{"x":1}}}`,
			want: []keptArgs{{args: `{"x":1}`}}},
		{name: "duplicate member: the last one", in: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"x":1},"arguments":{"y":2}}}`,
			want: []keptArgs{{args: `{"y":2}`}}},
		{name: "absent", in: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}`, want: []keptArgs{{}}},
		{name: "nested arguments member is not params.arguments", in: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{"arguments":1}}}`,
			want: []keptArgs{{}}},
		{name: "no params", in: `{"jsonrpc":"2.0","id":1,"method":"tools/call"}`, want: []keptArgs{{}}},
		{name: "params not an object", in: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[{"arguments":1}]}`, want: []keptArgs{{}}},
		{name: "prompts/get arguments are not tool arguments", in: `{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"p","arguments":{"k":"v"}}}`,
			want: []keptArgs{{}}},
		{name: "tools/call notification", in: `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"t","arguments":{"k":"v"}}}`,
			want: []keptArgs{{}}},
		{name: "response", in: `{"jsonrpc":"2.0","id":1,"result":{"arguments":{"k":"v"}}}`, want: []keptArgs{{}}},
		{name: "not JSON-RPC 2.0", in: `{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"k":"v"}}}`,
			want: []keptArgs{{}}},
		{name: "batch", in: "[" + toolCall(1, `{"a":1}`) + ", " + `{"jsonrpc":"2.0","id":2,"method":"tools/list"}` + ", " +
			toolCall(3, ` { "b" : [ 2 ] } `) + ", " + `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"t"}}` + "]",
			want: []keptArgs{{args: `{"a":1}`}, {}, {args: `{"b":[2]}`}, {}}},
		{name: "batch with truncation", limit: 8, in: "[" + toolCall(1, `{"a":"0123456789"}`) + "," + toolCall(2, `{"a":1}`) + "]",
			want: []keptArgs{{args: `{"a":"01`, truncated: true}, {args: `{"a":1}`}}},

		{name: "exactly at the limit", limit: 7, in: toolCall(1, `{"a":1}`), want: []keptArgs{{args: `{"a":1}`}}},
		{name: "one over the limit", limit: 6, in: toolCall(1, `{"a":1}`), want: []keptArgs{{args: `{"a":1`, truncated: true}}},
		{name: "limit counts compacted bytes", limit: 7, in: toolCall(1, `{ "a" : 1 }`), want: []keptArgs{{args: `{"a":1}`}}},
		{name: "cut inside a string", limit: 10, in: toolCall(1, `{"a":"0123456789"}`), want: []keptArgs{{args: `{"a":"0123`, truncated: true}}},
		{name: "cut inside an escape", limit: 8, in: toolCall(1, `{"a":"\u00e9"}`), want: []keptArgs{{args: `{"a":"\u`, truncated: true}}},
		{name: "cut before a 2-byte rune", limit: 7, in: toolCall(1, `{"a":"é"}`), want: []keptArgs{{args: `{"a":"`, truncated: true}}},
		{name: "cut after a 2-byte rune", limit: 8, in: toolCall(1, `{"a":"é"}`), want: []keptArgs{{args: `{"a":"é`, truncated: true}}},
		{name: "cut inside a 3-byte rune", limit: 8, in: toolCall(1, `{"a":"€"}`), want: []keptArgs{{args: `{"a":"`, truncated: true}}},
		{name: "cut inside a 4-byte rune", limit: 9, in: toolCall(1, `{"a":"😀"}`), want: []keptArgs{{args: `{"a":"`, truncated: true}}},
		{name: "cut after a 4-byte rune", limit: 10, in: toolCall(1, `{"a":"😀"}`), want: []keptArgs{{args: `{"a":"😀`, truncated: true}}},
		{name: "limit below one rune", limit: 1, in: toolCall(1, `"😀"`), want: []keptArgs{{args: `"`, truncated: true}}},
		{name: "not UTF-8 is cut as it is", limit: 8, in: toolCall(1, "{\"a\":\"\xff\xfe\xfd\"}"), want: []keptArgs{{args: "{\"a\":\"\xff\xfe", truncated: true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			on := Peeker{KeepToolArguments: true, MaxArgumentBytes: tt.limit}
			msgs, _, isJSON := on.PeekJSONRPC([]byte(tt.in))
			if !isJSON || len(msgs) != len(tt.want) {
				t.Fatalf("isJSON=%v, %d messages %+v, want %d", isJSON, len(msgs), msgs, len(tt.want))
			}
			for i, m := range msgs {
				if got := (keptArgs{m.Arguments, m.ArgumentsTruncated}); got != tt.want[i] {
					t.Errorf("message %d: Arguments %q truncated=%v, want %q truncated=%v", i, got.args, got.truncated, tt.want[i].args, tt.want[i].truncated)
				}
			}
			// Off, the same input keeps nothing and everything else is
			// unchanged.
			var off Peeker
			offMsgs, _, _ := off.PeekJSONRPC([]byte(tt.in))
			for i, m := range offMsgs {
				if m.Arguments != "" || m.ArgumentsTruncated {
					t.Errorf("message %d: kept %q truncated=%v with KeepToolArguments off", i, m.Arguments, m.ArgumentsTruncated)
				}
				on := msgs[i]
				on.Arguments, on.ArgumentsTruncated = "", false
				if m != on {
					t.Errorf("message %d differs beyond the arguments:\n off %+v\n  on %+v", i, m, on)
				}
			}
		})
	}
}

// TestArgumentsCutAtRuneBoundary cuts valid UTF-8 arguments at every limit:
// the result is a prefix, valid UTF-8, and short of the limit by less than
// one rune.
func TestArgumentsCutAtRuneBoundary(t *testing.T) {
	args := `{"s":"aé€😀b😀😀é€€a","t":"` + strings.Repeat("ü", 5) + `"}`
	in := []byte(toolCall(1, args))
	for limit := 1; limit <= len(args)+1; limit++ {
		pk := Peeker{KeepToolArguments: true, MaxArgumentBytes: limit}
		msgs, _, _ := pk.PeekJSONRPC(in)
		got, truncated := msgs[0].Arguments, msgs[0].ArgumentsTruncated
		if truncated != (limit < len(args)) {
			t.Fatalf("limit %d: truncated=%v", limit, truncated)
		}
		if !strings.HasPrefix(args, got) || !utf8.ValidString(got) || len(got) > limit || len(got) <= min(limit, len(args))-utf8.UTFMax {
			t.Fatalf("limit %d: %q (%d bytes)", limit, got, len(got))
		}
	}
}

// TestArgumentsAllocations: keeping arguments costs the one string it
// returns, and nothing when off.
func TestArgumentsAllocations(t *testing.T) {
	for _, args := range []string{`{"query":"q","limit":10}`, `{ "query" : "q" , "limit" : 10 }`} {
		in := []byte(toolCall(1, args))
		allocs := func(pk *Peeker) float64 {
			dst := make([]Message, 0, 1)
			return testing.AllocsPerRun(100, func() { pk.peekInto(dst, in) })
		}
		off := allocs(&Peeker{})
		on := allocs(&Peeker{KeepToolArguments: true})
		if on != off+1 {
			t.Errorf("%s: %v allocations kept, %v off; want one more", args, on, off)
		}
	}
}

func TestConfigArguments(t *testing.T) {
	def := DefaultConfig()
	if def.KeepToolArguments || def.MaxArgumentBytes != DefaultMaxArgumentBytes {
		t.Fatalf("defaults: KeepToolArguments=%v MaxArgumentBytes=%d", def.KeepToolArguments, def.MaxArgumentBytes)
	}
	if err := def.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := def
	bad.MaxArgumentBytes = -1
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "MaxArgumentBytes") {
		t.Fatalf("Validate with MaxArgumentBytes -1: %v", err)
	}
	for _, n := range []int{-1, 0} {
		if got := withDefaults(Config{MaxArgumentBytes: n}).MaxArgumentBytes; got != DefaultMaxArgumentBytes {
			t.Errorf("withDefaults(MaxArgumentBytes %d) = %d", n, got)
		}
	}
	if got := withDefaults(Config{MaxArgumentBytes: 5, KeepToolArguments: true}); got.MaxArgumentBytes != 5 || !got.KeepToolArguments {
		t.Errorf("withDefaults changed set values: %+v", got)
	}
}

// TestPipelineArguments feeds a tools/call POST cut in two at every offset
// (and byte by byte): the arguments arrive whole only with the option on.
func TestPipelineArguments(t *testing.T) {
	const args = `{"path":"/tmp/naïve \"x\"","n":[1,2]}`
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"read","arguments":{ "path" : "/tmp/naïve \"x\"" , "n" : [1, 2] }}}`
	raw := fmt.Sprintf("POST /mcp HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	sc := script{syn: true, steps: []step{{op: "data", fromA: true, data: []byte(raw)}, {op: "fin", fromA: true}}}
	for _, keep := range []bool{false, true} {
		cfg := DefaultConfig()
		cfg.KeepToolArguments = keep
		want := ""
		if keep {
			want = args
		}
		splits := []splitter{whole, byteByByte}
		for n := 1; n < len(raw); n++ {
			splits = append(splits, splitAt(n))
		}
		for i, split := range splits {
			obs, _ := run(t, cfg, split, sc)
			if len(obs) == 0 || obs[0].Kind != KindRequest || len(obs[0].Request.Messages) != 1 {
				t.Fatalf("keep=%v split %d: %s", keep, i, render(obs))
			}
			m := obs[0].Request.Messages[0]
			if m.Tool != "read" || m.Arguments != want || m.ArgumentsTruncated {
				t.Fatalf("keep=%v split %d: Tool %q Arguments %q truncated=%v, want %q", keep, i, m.Tool, m.Arguments, m.ArgumentsTruncated, want)
			}
		}
	}
}

// TestPipelineKeepsNoArgumentsByDefault: with the default Config an argument
// value appears nowhere in the observations.
func TestPipelineKeepsNoArgumentsByDefault(t *testing.T) {
	body := toolCall(1, `{"password":"hunter2"}`)
	raw := fmt.Sprintf("POST /mcp HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	sc := script{syn: true, steps: []step{{op: "data", fromA: true, data: []byte(raw)}}}
	obs, _ := run(t, DefaultConfig(), whole, sc)
	for _, o := range obs {
		if o.Request == nil {
			continue
		}
		if s := fmt.Sprintf("%+v", *o.Request); strings.Contains(s, "hunter2") {
			t.Fatalf("argument value kept: %s", s)
		}
	}
	if len(obs) == 0 || len(obs[0].Request.Messages) != 1 || obs[0].Request.Messages[0].ParamsHash == "" {
		t.Fatalf("request not decoded: %s", render(obs))
	}
}
