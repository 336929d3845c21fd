package decode

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
)

// rpcEnvelope is the top level of one JSON-RPC message. The raw fields are
// only looked at, never kept: argument and result values must not leave
// this file except as hashes.
type rpcEnvelope struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  *string         `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Code int `json:"code"`
	} `json:"error"`
}

// rpcParams holds the few params fields the detector needs.
type rpcParams struct {
	Name            string          `json:"name"`
	ProtocolVersion string          `json:"protocolVersion"`
	ProgressToken   json.RawMessage `json:"progressToken"`
	Progress        *float64        `json:"progress"`
	Meta            struct {
		ProgressToken json.RawMessage `json:"progressToken"`
	} `json:"_meta"`
}

// Peeker classifies JSON-RPC messages. It keeps scratch buffers between
// calls, so it is not safe for concurrent use; each worker has its own.
type Peeker struct {
	canon   []byte
	members []canonMember
}

// PeekJSONRPC classifies the JSON-RPC message or batch in b. isJSON is false
// when b is not a JSON object or array at all. A JSON value that is not JSON-RPC
// 2.0 gives a single MsgInvalid message.
func (pk *Peeker) PeekJSONRPC(b []byte) (msgs []Message, batch bool, isJSON bool) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil, false, false
	}
	switch b[0] {
	case '{':
		m, ok := pk.peekOne(b)
		if !ok {
			return nil, false, false
		}
		return []Message{m}, false, true
	case '[':
		var elems []json.RawMessage
		if err := json.Unmarshal(b, &elems); err != nil {
			return nil, false, false
		}
		if len(elems) == 0 {
			// An empty batch is an invalid request in JSON-RPC 2.0.
			return []Message{{Type: MsgInvalid}}, true, true
		}
		msgs = make([]Message, len(elems))
		for i, e := range elems {
			m, ok := pk.peekOne(e)
			if !ok {
				m = Message{Type: MsgInvalid}
			}
			msgs[i] = m
		}
		return msgs, true, true
	}
	return nil, false, false
}

// HasJSONRPC says whether any message is JSON-RPC 2.0.
func HasJSONRPC(msgs []Message) bool {
	for i := range msgs {
		if msgs[i].Type != MsgInvalid {
			return true
		}
	}
	return false
}

// peekOne classifies one message; ok is false when raw is not valid JSON.
func (pk *Peeker) peekOne(raw []byte) (Message, bool) {
	var env rpcEnvelope
	if err := json.Unmarshal(raw, &env); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return Message{Type: MsgInvalid}, true
		}
		return Message{}, false
	}
	if env.JSONRPC != "2.0" {
		return Message{Type: MsgInvalid}, true
	}
	var m Message
	if env.ID != nil {
		m.ID = compactJSON(env.ID)
	}
	switch {
	case env.Method != nil:
		m.Method = *env.Method
		m.Type = MsgNotification
		if env.ID != nil {
			m.Type = MsgRequest
		}
		if env.Params != nil {
			m.ParamsHash = pk.hash(env.Params)
			pk.peekParams(&m, env.Params)
		}
	case env.Error != nil:
		m.Type = MsgError
		m.ErrorCode = env.Error.Code
	case env.Result != nil:
		m.Type = MsgResponse
		m.ResultHash = pk.hash(env.Result)
		if bytes.Contains(env.Result, []byte(`"protocolVersion"`)) {
			var r struct {
				ProtocolVersion string `json:"protocolVersion"`
			}
			if json.Unmarshal(env.Result, &r) == nil {
				m.ProtocolVersion = r.ProtocolVersion
			}
		}
	default:
		m.Type = MsgInvalid
	}
	return m, true
}

// peekParams reads the tool name, protocol version and progress fields, and
// only decodes params when one of them can be there.
func (pk *Peeker) peekParams(m *Message, params []byte) {
	wantName := m.Method == "tools/call"
	wantVersion := m.Method == "initialize"
	wantProgress := bytes.Contains(params, []byte(`"progressToken"`))
	if !wantName && !wantVersion && !wantProgress {
		return
	}
	var p rpcParams
	// A type mismatch in one field still fills the others.
	_ = json.Unmarshal(params, &p)
	if wantName {
		m.Tool = p.Name
	}
	if wantVersion {
		m.ProtocolVersion = p.ProtocolVersion
	}
	if m.Method == "notifications/progress" {
		if p.ProgressToken != nil {
			m.ProgressToken = compactJSON(p.ProgressToken)
		}
		if p.Progress != nil {
			m.Progress, m.HasProgress = *p.Progress, true
		}
	} else if m.Type == MsgRequest && p.Meta.ProgressToken != nil {
		m.ProgressToken = compactJSON(p.Meta.ProgressToken)
	}
}

func compactJSON(raw []byte) string {
	if bytes.IndexAny(raw, " \t\r\n") < 0 {
		return string(raw)
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// hash returns the hex SHA-256 of v in canonical JSON.
func (pk *Peeker) hash(v []byte) string {
	out, err := pk.Canonical(pk.canon[:0], v)
	if err != nil {
		// Unreachable for values json.Unmarshal accepted; hash the raw
		// bytes rather than nothing.
		out = append(pk.canon[:0], v...)
	}
	pk.canon = out[:0]
	sum := sha256.Sum256(out)
	return hex.EncodeToString(sum[:])
}

// CanonicalJSON appends v in canonical form to dst: no insignificant
// whitespace, object keys sorted by their decoded value (recursively),
// strings re-escaped minimally; numbers are kept as written.
func CanonicalJSON(dst, v []byte) ([]byte, error) {
	var pk Peeker
	return pk.Canonical(dst, v)
}

// Canonical is CanonicalJSON using the peeker's scratch space.
func (pk *Peeker) Canonical(dst, v []byte) ([]byte, error) {
	c := canonicalizer{src: v, members: pk.members[:0]}
	out, err := c.value(dst)
	pk.members = c.members[:0]
	if err != nil {
		return dst, err
	}
	c.skipSpace()
	if c.i != len(c.src) {
		return dst, errCanonTrailing
	}
	return out, nil
}

var (
	errCanonSyntax   = errors.New("decode: invalid JSON")
	errCanonDepth    = errors.New("decode: JSON nested too deeply")
	errCanonTrailing = errors.New("decode: data after JSON value")
)

// maxCanonDepth matches encoding/json's nesting limit.
const maxCanonDepth = 10000

type canonMember struct {
	key        []byte // decoded key, for sorting
	start, end int    // `"key":value` in the output
}

type canonicalizer struct {
	src     []byte
	i       int
	depth   int
	members []canonMember
}

func (c *canonicalizer) skipSpace() {
	for c.i < len(c.src) {
		switch c.src[c.i] {
		case ' ', '\t', '\r', '\n':
			c.i++
		default:
			return
		}
	}
}

func (c *canonicalizer) value(dst []byte) ([]byte, error) {
	c.skipSpace()
	if c.i >= len(c.src) {
		return dst, errCanonSyntax
	}
	switch ch := c.src[c.i]; {
	case ch == '{':
		return c.object(dst)
	case ch == '[':
		return c.array(dst)
	case ch == '"':
		out, _, err := c.str(dst)
		return out, err
	case ch == 't':
		return c.literal(dst, "true")
	case ch == 'f':
		return c.literal(dst, "false")
	case ch == 'n':
		return c.literal(dst, "null")
	case ch == '-' || (ch >= '0' && ch <= '9'):
		start := c.i
		for c.i < len(c.src) {
			ch := c.src[c.i]
			if (ch >= '0' && ch <= '9') || ch == '-' || ch == '+' || ch == '.' || ch == 'e' || ch == 'E' {
				c.i++
				continue
			}
			break
		}
		return append(dst, c.src[start:c.i]...), nil
	}
	return dst, errCanonSyntax
}

func (c *canonicalizer) literal(dst []byte, lit string) ([]byte, error) {
	if !bytes.HasPrefix(c.src[c.i:], []byte(lit)) {
		return dst, errCanonSyntax
	}
	c.i += len(lit)
	return append(dst, lit...), nil
}

// str copies a string token; it returns the decoded value for sorting keys.
func (c *canonicalizer) str(dst []byte) ([]byte, []byte, error) {
	start := c.i
	c.i++
	escaped := false
	for {
		j := bytes.IndexAny(c.src[c.i:], `"\`)
		if j < 0 {
			return dst, nil, errCanonSyntax
		}
		c.i += j
		if c.src[c.i] == '"' {
			c.i++
			break
		}
		escaped = true
		c.i += 2
		if c.i > len(c.src) {
			return dst, nil, errCanonSyntax
		}
	}
	tok := c.src[start:c.i]
	if !escaped {
		return append(dst, tok...), tok[1 : len(tok)-1], nil
	}
	var s string
	if err := json.Unmarshal(tok, &s); err != nil {
		return dst, nil, errCanonSyntax
	}
	return appendJSONString(dst, s), []byte(s), nil
}

// appendJSONString escapes only what JSON requires, so one string has one
// canonical spelling.
func appendJSONString(dst []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == '"' || ch == '\\':
			dst = append(dst, '\\', ch)
		case ch == '\n':
			dst = append(dst, '\\', 'n')
		case ch == '\r':
			dst = append(dst, '\\', 'r')
		case ch == '\t':
			dst = append(dst, '\\', 't')
		case ch < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[ch>>4], hexDigits[ch&0xF])
		default:
			dst = append(dst, ch)
		}
	}
	return append(dst, '"')
}

func (c *canonicalizer) array(dst []byte) ([]byte, error) {
	if c.depth++; c.depth > maxCanonDepth {
		return dst, errCanonDepth
	}
	defer func() { c.depth-- }()
	c.i++
	dst = append(dst, '[')
	c.skipSpace()
	if c.i < len(c.src) && c.src[c.i] == ']' {
		c.i++
		return append(dst, ']'), nil
	}
	for {
		var err error
		if dst, err = c.value(dst); err != nil {
			return dst, err
		}
		c.skipSpace()
		if c.i >= len(c.src) {
			return dst, errCanonSyntax
		}
		switch c.src[c.i] {
		case ',':
			c.i++
			dst = append(dst, ',')
		case ']':
			c.i++
			return append(dst, ']'), nil
		default:
			return dst, errCanonSyntax
		}
	}
}

func (c *canonicalizer) object(dst []byte) ([]byte, error) {
	if c.depth++; c.depth > maxCanonDepth {
		return dst, errCanonDepth
	}
	defer func() { c.depth-- }()
	c.i++
	objStart := len(dst)
	dst = append(dst, '{')
	base := len(c.members)
	c.skipSpace()
	if c.i < len(c.src) && c.src[c.i] == '}' {
		c.i++
		return append(dst, '}'), nil
	}
	for {
		c.skipSpace()
		if c.i >= len(c.src) || c.src[c.i] != '"' {
			return dst, errCanonSyntax
		}
		start := len(dst)
		var key []byte
		var err error
		if dst, key, err = c.str(dst); err != nil {
			return dst, err
		}
		c.skipSpace()
		if c.i >= len(c.src) || c.src[c.i] != ':' {
			return dst, errCanonSyntax
		}
		c.i++
		dst = append(dst, ':')
		if dst, err = c.value(dst); err != nil {
			return dst, err
		}
		c.members = append(c.members, canonMember{key: key, start: start, end: len(dst)})
		c.skipSpace()
		if c.i >= len(c.src) {
			return dst, errCanonSyntax
		}
		if c.src[c.i] == '}' {
			c.i++
			break
		}
		if c.src[c.i] != ',' {
			return dst, errCanonSyntax
		}
		c.i++
		dst = append(dst, ',')
	}
	members := c.members[base:]
	c.members = c.members[:base]
	sorted := slices.IsSortedFunc(members, compareMembers)
	if sorted {
		return append(dst, '}'), nil
	}
	slices.SortStableFunc(members, compareMembers)
	// Rebuild the members in key order behind the object, then move it back.
	body := len(dst)
	for i, m := range members {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, dst[m.start:m.end]...)
	}
	n := copy(dst[objStart+1:], dst[body:])
	dst = dst[:objStart+1+n]
	return append(dst, '}'), nil
}

func compareMembers(a, b canonMember) int { return bytes.Compare(a.key, b.key) }
