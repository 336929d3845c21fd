package decode

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
)

// TestHashesAreKeyed: with a hash key, the Authorization hash, a tool
// call's arguments hash and an event's data hash are keyed: a guess hashed
// without the key matches none of them; the same key gives the same values
// (agents of one deployment agree), another key other values.
func TestHashesAreKeyed(t *testing.T) {
	const pin = "4711"
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"unlock","arguments":{"pin":"` + pin + `"}}}`
	sc := parseScript(t, `c> POST /mcp HTTP/1.1\r\nAuthorization: Bearer `+pin+`\r\nContent-Type: application/json\r\nContent-Length: `+
		strconv.Itoa(len(body))+`\r\n\r\n`+strings.ReplaceAll(body, `\`, `\\`)+`
s> HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: {"pin":"`+pin+`"}\n\n
close fin`)
	hashes := func(key string) (auth, params, data string) {
		cfg := DefaultConfig()
		cfg.HashKey = []byte(key)
		obs, _ := run(t, cfg, whole, sc)
		for _, o := range obs {
			switch {
			case o.Kind == KindRequest:
				auth = o.Request.AuthHash
				if len(o.Request.Messages) == 1 {
					params = o.Request.Messages[0].ParamsHash
				}
			case o.Kind == KindEvent:
				data = o.Event.DataHash
			}
		}
		if auth == "" || params == "" || data == "" {
			t.Fatalf("key %q: auth %q params %q data %q\n%s", key, auth, params, data, render(obs))
		}
		return auth, params, data
	}
	plainAuth, plainParams, plainData := hashes("")
	a1, p1, d1 := hashes("deployment-secret-one")
	a2, p2, d2 := hashes("deployment-secret-one")
	a3, p3, d3 := hashes("deployment-secret-two")
	if a1 != a2 || p1 != p2 || d1 != d2 {
		t.Error("the same key gives different hashes")
	}
	if a1 == a3 || p1 == p3 || d1 == d3 {
		t.Error("another key gives the same hashes")
	}
	if a1 == plainAuth || p1 == plainParams || d1 == plainData {
		t.Error("a keyed hash equals the unkeyed one")
	}
	sum := sha256.Sum256([]byte("Bearer " + pin))
	if plainAuth != hex.EncodeToString(sum[:]) {
		t.Errorf("without a key the Authorization hash is not SHA-256")
	}
	mac := hmac.New(sha256.New, []byte("deployment-secret-one"))
	mac.Write([]byte("Bearer " + pin))
	if a1 != hex.EncodeToString(mac.Sum(nil)) {
		t.Errorf("the keyed Authorization hash is not HMAC-SHA-256 under the key")
	}
	for _, guess := range []string{pin, "Bearer " + pin, `{"pin":"` + pin + `"}`} {
		g := sha256.Sum256([]byte(guess))
		if strings.Contains(a1+p1+d1, hex.EncodeToString(g[:])) || strings.Contains(a1+p1+d1, hex.EncodeToString(g[:8])) {
			t.Errorf("the guess %q hashed without the key matches a stored hash", guess)
		}
	}
}

func TestShortHashKeyRejected(t *testing.T) {
	cfg := DefaultConfig()
	cfg.HashKey = []byte("short")
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "HashKey") {
		t.Fatalf("a 5-byte key: %v", err)
	}
}

// TestQueryStringsNotKept: a request target's query (a token, a user id)
// is replaced by its length unless the operator opts in.
func TestQueryStringsNotKept(t *testing.T) {
	sc := parseScript(t, `c> GET /mcp?token=s3cret&user=ann HTTP/1.1\r\nMcp-Session-Id: S\r\n\r\n`)
	for _, keep := range []bool{false, true} {
		cfg := DefaultConfig()
		cfg.KeepQueryStrings = keep
		obs, _ := run(t, cfg, whole, sc)
		if len(obs) != 1 || obs[0].Request == nil {
			t.Fatalf("got %s", render(obs))
		}
		want := "/mcp?(query of 21 bytes not kept)"
		if keep {
			want = "/mcp?token=s3cret&user=ann"
		}
		if got := obs[0].Request.Path; got != want {
			t.Errorf("keep %v: path %q, want %q", keep, got, want)
		}
	}
}
