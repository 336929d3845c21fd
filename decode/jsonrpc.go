package decode

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Peeker classifies JSON-RPC messages. It keeps scratch buffers between
// calls, so it is not safe for concurrent use; each worker has its own.
type Peeker struct {
	// KeepToolArguments and MaxArgumentBytes are Config's: the zero Peeker
	// keeps no argument values, and MaxArgumentBytes <= 0 means
	// DefaultMaxArgumentBytes.
	KeepToolArguments bool
	MaxArgumentBytes  int
	// HashKey is Config's: the key of every hash of user data (see
	// digester).
	HashKey []byte

	dg      *digester // made from HashKey on first use
	canon   []byte
	members []canonMember
	args    []byte // compacted arguments, before they are copied out
	ident   []byte // params without _meta (identityHash)
}

// PeekJSONRPC classifies the JSON-RPC message or batch in b. isJSON is false
// when b is not a JSON object or array at all. A JSON value that is not
// JSON-RPC 2.0 gives a MsgInvalid message. Argument and result values are
// only hashed, never kept, unless KeepToolArguments is set: then a tools/call
// request's arguments are kept in Message.Arguments.
func (pk *Peeker) PeekJSONRPC(b []byte) (msgs []Message, batch bool, isJSON bool) {
	return pk.peekInto(nil, b)
}

// peekInto is PeekJSONRPC appending to dst (empty, with room for the usual
// single message), so a caller can keep the message in the allocation that
// holds its observation. It returns nil when b is not JSON.
func (pk *Peeker) peekInto(dst []Message, b []byte) (msgs []Message, batch bool, isJSON bool) {
	i := skipSpace(b, 0)
	if i >= len(b) {
		return nil, false, false
	}
	switch b[i] {
	case '{':
		m, ok := pk.peekOne(b[i:])
		if !ok {
			return nil, false, false
		}
		return append(dst, m), false, true
	case '[':
		msgs = dst
		err := eachElement(b[i:], func(elem []byte) {
			m, ok := pk.peekOne(elem)
			if !ok {
				m = Message{Type: MsgInvalid}
			}
			msgs = append(msgs, m)
		})
		if err != nil {
			return nil, false, false
		}
		if len(msgs) == 0 {
			// An empty batch is an invalid request in JSON-RPC 2.0.
			msgs = []Message{{Type: MsgInvalid}}
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

// rpcFields are the raw top-level members of one message.
type rpcFields struct {
	version, id, method, params, result, errObj []byte
}

// peekOne classifies one message; ok is false when raw is not valid JSON.
func (pk *Peeker) peekOne(raw []byte) (Message, bool) {
	var f rpcFields
	if raw[0] != '{' {
		if _, err := skipValue(raw, 0, 0); err != nil {
			return Message{}, false
		}
		return Message{Type: MsgInvalid}, true
	}
	err := eachMember(raw, func(key, value []byte) {
		// One switch on the name rather than a comparison per member.
		switch string(memberName(key)) {
		case "jsonrpc":
			f.version = value
		case "id":
			f.id = value
		case "method":
			f.method = value
		case "params":
			f.params = value
		case "result":
			f.result = value
		case "error":
			// "error": null beside a result (JSON-RPC 1.0's shape, a
			// struct encoded without omitempty) is no error.
			if string(value) != "null" {
				f.errObj = value
			}
		}
	})
	if err != nil {
		return Message{}, false
	}
	var m Message
	if f.id != nil {
		m.ID = compactJSON(f.id)
	}
	// The version is nearly always spelled exactly "2.0"; comparing the raw
	// token spares jsonString's table lookup on every message.
	if string(f.version) != `"2.0"` && !isVersion20(f.version) {
		return Message{Type: MsgInvalid, ID: m.ID}, true
	}
	switch {
	case f.method != nil:
		method, ok := jsonString(f.method)
		if !ok {
			return Message{Type: MsgInvalid, ID: m.ID}, true
		}
		m.Method = method
		m.Type = MsgNotification
		if f.id != nil {
			m.Type = MsgRequest
		}
		if f.params != nil {
			// Only a request's params are compared (a repeated call, an
			// unknown outcome's identity); a notification's never are, and
			// notifications are most SSE events, so they skip the hash.
			if m.Type == MsgRequest {
				m.ParamsHash = pk.identityHash(f.params)
			}
			pk.peekParams(&m, f.params)
		}
	case f.errObj != nil:
		m.Type = MsgError
		_ = eachMember(f.errObj, func(key, value []byte) {
			switch {
			case keyIs(key, "code"):
				m.ErrorCode, _ = jsonInt(value)
			case keyIs(key, "message"):
				msg, _ := jsonString(value)
				m.UnknownSession = saysUnknownSession(msg)
			}
		})
	case f.result != nil:
		m.Type = MsgResponse
		m.ResultHash = pk.hash(f.result)
		if bytes.Contains(f.result, []byte(`"tools"`)) {
			m.Tools = toolAnnotations(f.result)
		}
		if bytes.Contains(f.result, []byte(`"taskId"`)) {
			m.CreatesTask = createsTask(f.result)
		}
		if bytes.Contains(f.result, []byte(`"isError"`)) {
			_ = eachMember(f.result, func(key, value []byte) {
				m.ToolError = m.ToolError || keyIs(key, "isError") && string(value) == "true"
			})
		}
		if bytes.Contains(f.result, []byte(`"protocolVersion"`)) {
			_ = eachMember(f.result, func(key, value []byte) {
				if keyIs(key, "protocolVersion") {
					m.ProtocolVersion, _ = jsonString(value)
				}
			})
		}
	default:
		m.Type = MsgInvalid
	}
	return m, true
}

// peekParams reads the tool name (and, when kept, the arguments), protocol
// version and progress fields, and only walks params when one of them can be
// there.
func (pk *Peeker) peekParams(m *Message, params []byte) {
	wantName := m.Method == "tools/call"
	wantArgs := wantName && pk.KeepToolArguments && m.Type == MsgRequest
	wantVersion := m.Method == "initialize"
	progress := m.Method == "notifications/progress"
	cancelled := m.Method == "notifications/cancelled"
	wantMeta := m.Type == MsgRequest && (bytes.Contains(params, []byte(`"progressToken"`)) || bytes.Contains(params, []byte(metaPrefix)))
	if !wantName && !wantVersion && !progress && !cancelled && !wantMeta {
		return
	}
	_ = eachMember(params, func(key, value []byte) {
		switch {
		case wantName && keyIs(key, "name"):
			m.Tool, _ = jsonString(value)
		case wantArgs && keyIs(key, "arguments"):
			m.Arguments, m.ArgumentsTruncated = pk.keepArguments(value)
		case wantVersion && keyIs(key, "protocolVersion"):
			m.ProtocolVersion, _ = jsonString(value)
		case wantVersion && keyIs(key, "clientInfo"):
			m.ClientInfo = clientInfo(value)
		case progress && keyIs(key, "progressToken"):
			m.ProgressToken = compactJSON(value)
		case cancelled && keyIs(key, "requestId"):
			m.CancelledID = compactJSON(value)
		case progress && keyIs(key, "progress"):
			if f, err := strconv.ParseFloat(string(value), 64); err == nil {
				m.Progress, m.HasProgress = f, true
			}
		case progress && keyIs(key, "total"):
			if f, err := strconv.ParseFloat(string(value), 64); err == nil {
				m.ProgressTotal, m.HasTotal = f, true
			}
		case wantMeta && keyIs(key, "_meta"):
			_ = eachMember(value, func(key, value []byte) {
				switch {
				case keyIs(key, "progressToken"):
					m.ProgressToken = compactJSON(value)
				case keyIs(key, metaPrefix+"clientInfo") && m.ClientInfo == "":
					m.ClientInfo = clientInfo(value)
				case keyIs(key, metaPrefix+"protocolVersion") && m.ProtocolVersion == "":
					m.ProtocolVersion, _ = jsonString(value)
				}
			})
		}
	})
}

// createsTask says whether a result is a task the server created for the
// request (tasks extension: {"task": {"taskId": ...}}).
func createsTask(result []byte) bool {
	found := false
	_ = eachMember(result, func(key, value []byte) {
		if keyIs(key, "task") {
			_ = eachMember(value, func(key, _ []byte) {
				found = found || keyIs(key, "taskId")
			})
		}
	})
	return found
}

// saysUnknownSession reads an error message as the server saying the
// session id is not (or no longer) valid: it names a session and says it is
// not found, invalid, unknown, expired or missing. The SDKs' own words:
// "Session not found" (TypeScript, go-sdk), "Bad Request: No valid session
// ID provided" (the TypeScript README's routing up to 1.23), "Invalid
// session ID", "Session expired".
func saysUnknownSession(msg string) bool {
	m := strings.ToLower(msg)
	if !strings.Contains(m, "session") {
		return false
	}
	for _, w := range []string{"not found", "no valid", "invalid", "unknown", "expired", "does not exist", "no such"} {
		if strings.Contains(m, w) {
			return true
		}
	}
	return false
}

// metaPrefix starts the _meta keys revision 2026-07-28 puts on every
// request (clientInfo, clientCapabilities, protocolVersion).
const metaPrefix = "io.modelcontextprotocol/"

// clientInfo reads a clientInfo object as "name/version" ("" when it has
// neither).
func clientInfo(obj []byte) string {
	var name, version string
	_ = eachMember(obj, func(key, value []byte) {
		switch {
		case keyIs(key, "name"):
			name, _ = jsonString(value)
		case keyIs(key, "version"):
			version, _ = jsonString(value)
		}
	})
	if name == "" && version == "" {
		return ""
	}
	return name + "/" + version
}

// keepArguments returns the arguments value raw (valid JSON: the scanner
// checked it) without insignificant whitespace, cut to MaxArgumentBytes;
// truncated says it was cut. Escapes, key order and numbers stay as sent.
// The text is copied out: raw lives in a buffer that is reused.
func (pk *Peeker) keepArguments(raw []byte) (args string, truncated bool) {
	limit := pk.MaxArgumentBytes
	if limit <= 0 {
		limit = DefaultMaxArgumentBytes
	}
	if len(raw) <= limit && !hasSpace(raw) {
		return string(raw), false
	}
	out := pk.args[:0]
	inString, escaped := false, false
	for _, c := range raw {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			continue
		case c == '"':
			inString = true
		}
		if len(out) == limit {
			out = out[:utf8Cut(out)]
			truncated = true
			break
		}
		out = append(out, c)
	}
	pk.args = out[:0]
	return string(out), truncated
}

// utf8Cut returns how much of b to keep so that it does not end in the
// first bytes of a multi-byte UTF-8 sequence. It looks at the last
// utf8.UTFMax-1 bytes only: input that is not UTF-8 (JSON strings on the
// wire need not be) is cut as it is and may stay invalid.
func utf8Cut(b []byte) int {
	for i := len(b) - 1; i >= 0 && i > len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			break
		}
	}
	return len(b)
}

// isVersion20 says whether a raw jsonrpc member is the string "2.0" however
// it is escaped.
func isVersion20(raw []byte) bool {
	v, ok := jsonString(raw)
	return ok && v == "2.0"
}

// hexDigest spells a SHA-256 in hex with a single allocation.
func hexDigest(sum [32]byte) string {
	var buf [64]byte
	hexEncode(buf[:], sum[:])
	return string(buf[:])
}

// hexPairs holds the two lower-case hex digits of every byte.
var hexPairs = func() (t [256][2]byte) {
	const digits = "0123456789abcdef"
	for i := range t {
		t[i] = [2]byte{digits[i>>4], digits[i&0xf]}
	}
	return t
}()

// hexEncode is hex.Encode with a table lookup per byte rather than two
// shifts and lookups per digit: every request, result and event is
// spelled in hex. dst must hold 2*len(src) bytes.
func hexEncode(dst, src []byte) {
	dst = dst[:2*len(src)]
	for i, b := range src {
		p := hexPairs[b]
		dst[2*i], dst[2*i+1] = p[0], p[1]
	}
}

// hasSpace reports JSON whitespace in b. A plain loop: bytes.ContainsAny
// builds its byte set on every call, and b is short.
func hasSpace(b []byte) bool {
	for _, c := range b {
		if c == ' ' || c == '\t' || c == '\r' || c == '\n' {
			return true
		}
	}
	return false
}

func compactJSON(raw []byte) string {
	if s, ok := smallIntString(raw); ok {
		return s
	}
	if len(raw) > 0 && raw[0] == '"' && bytes.IndexByte(raw, '\\') >= 0 {
		// One string spelled with escapes or without ("\u00e9", "é") is
		// one id: a response echoes the request's id by value, not by
		// spelling. Re-escaped minimally, as CanonicalJSON does.
		// Unless decoding lost something: a lone surrogate ("\ud800")
		// decodes to U+FFFD, as does another, so the text stays.
		if v, ok := jsonString(raw); ok && !strings.ContainsRune(v, utf8.RuneError) {
			return string(appendJSONString(nil, v))
		}
	}
	if !hasSpace(raw) {
		return string(raw)
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// smallInts spells 0 to 999: JSON-RPC ids and progress tokens are mostly
// small counters, and a shared string spares an allocation per message.
var smallInts = func() (t [1000]string) {
	for i := range t {
		t[i] = strconv.Itoa(i)
	}
	return t
}()

// smallIntString returns the shared string of raw when raw is one of
// smallInts exactly as spelled there (no sign, no leading zero).
func smallIntString(raw []byte) (string, bool) {
	if len(raw) == 0 || len(raw) > 3 || (raw[0] == '0' && len(raw) > 1) {
		return "", false
	}
	n := 0
	for _, c := range raw {
		if c < '0' || c > '9' {
			return "", false
		}
		n = n*10 + int(c-'0')
	}
	return smallInts[n], true
}

// toolAnnotations reads a tools/list result's tools as Message.Tools: each
// name after the mark of its annotations. Any result with a tools array of
// that shape is read: a response does not name its method, and a list of
// annotated tools is what it is wherever it comes from.
func toolAnnotations(result []byte) string {
	var lines []string
	_ = eachMember(result, func(key, value []byte) {
		if !keyIs(key, "tools") {
			return
		}
		_ = eachElement(value, func(tool []byte) {
			var name string
			var readOnly, idempotent, destroys bool
			_ = eachMember(tool, func(key, value []byte) {
				switch {
				case keyIs(key, "name"):
					name, _ = jsonString(value)
				case keyIs(key, "annotations"):
					_ = eachMember(value, func(key, value []byte) {
						on := string(value) == "true"
						switch {
						case keyIs(key, "readOnlyHint"):
							readOnly = on
						case keyIs(key, "idempotentHint"):
							idempotent = on
						case keyIs(key, "destructiveHint"):
							destroys = on
						}
					})
				}
			})
			if name == "" || strings.Contains(name, "\n") || len(lines) >= MaxAnnotatedTools {
				return
			}
			mark := ToolPlain
			switch {
			case readOnly || idempotent:
				mark = ToolRepeatable
			case destroys:
				mark = ToolDestructive
			}
			lines = append(lines, string(rune(mark))+name)
		})
	})
	return strings.Join(lines, "\n")
}

// identityHash is the hash of a request's params without their top-level
// _meta: a progress token, trace context or per-request revision data
// changes on every send of the same call (every SDK mints a new progress
// token per request) and is no part of what the call asks for.
func (pk *Peeker) identityHash(params []byte) string {
	if !bytes.Contains(params, []byte(`_meta`)) {
		return pk.hash(params)
	}
	buf := append(pk.ident[:0], '{')
	err := eachMember(params, func(key, value []byte) {
		if keyIs(key, "_meta") {
			return
		}
		if len(buf) > 1 {
			buf = append(buf, ',')
		}
		buf = append(append(append(buf, key...), ':'), value...)
	})
	pk.ident = buf[:0]
	if err != nil {
		return pk.hash(params) // not an object: nothing to leave out
	}
	return pk.hash(append(buf, '}'))
}

// digester returns the Peeker's keyed hash.
func (pk *Peeker) digester() *digester {
	if pk.dg == nil {
		pk.dg = newDigester(pk.HashKey)
	}
	return pk.dg
}

// hash returns the hex keyed SHA-256 of v in canonical JSON.
func (pk *Peeker) hash(v []byte) string {
	out, err := pk.Canonical(pk.canon[:0], v)
	if err != nil {
		// Unreachable for values json.Unmarshal accepted; hash the raw
		// bytes rather than nothing.
		out = append(pk.canon[:0], v...)
	}
	pk.canon = out[:0]
	return hexDigest(pk.digester().digest(out))
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
		end, err := skipNumber(c.src, c.i)
		if err != nil {
			return dst, err
		}
		c.i = end
		return append(dst, c.src[start:end]...), nil
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
	// Nearly every string is plain: when the scan stops at the closing
	// quote, the token is copied as it is, without skipString's second
	// look and the search for a backslash.
	if end := plainString(c.src, c.i+1); end < len(c.src) && c.src[end] == '"' {
		tok := c.src[c.i : end+1]
		c.i = end + 1
		return append(dst, tok...), tok[1 : len(tok)-1], nil
	}
	end, err := skipString(c.src, c.i)
	if err != nil {
		return dst, nil, err
	}
	tok := c.src[c.i:end]
	c.i = end
	if bytes.IndexByte(tok, '\\') < 0 {
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
