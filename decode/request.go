// Requests: the head, the body and the request observation.

package decode

import (
	"bytes"
	"strconv"
)

// requestObservation holds what one request needs in a single allocation:
// its observation, the Request and room for the usual single JSON-RPC
// message. The Request outlives the observation: later observations of the
// exchange point to it, up to its End (emitEnd).
type requestObservation struct {
	obs Observation
	req Request
	msg [1]Message
}

// redactQuery appends to dst the target with its query string (from index
// q, the '?') replaced by a marker with its length: a query can carry a
// token or a user id, and the path goes into evidence and explanations.
func redactQuery(dst, target []byte, q int) []byte {
	dst = append(dst, target[:q]...)
	dst = append(dst, "?(query of "...)
	dst = strconv.AppendInt(dst, int64(len(target)-q-1), 10)
	return append(dst, " bytes not kept)"...)
}

// absoluteForm splits a request target in absolute form (http://host/path,
// as a client sends it to a forward proxy) into its authority and its path
// ("/" when it has none); other targets come back as they are, with a nil
// authority. The authority then stands for the Host header (RFC 9112
// 3.2.2), so the request names the endpoint its origin-form hop names.
func absoluteForm(target []byte) (authority, path []byte) {
	rest, ok := cutSchemeFold(target, "http://")
	if !ok {
		if rest, ok = cutSchemeFold(target, "https://"); !ok {
			return nil, target
		}
	}
	end := bytes.IndexAny(rest, "/?")
	if end < 0 {
		return rest, []byte("/")
	}
	if rest[end] == '?' {
		return rest[:end], append([]byte("/"), rest[end:]...)
	}
	return rest[:end], rest[end:]
}

// cutSchemeFold is bytes.CutPrefix with the prefix (lower case) matched in
// any case.
func cutSchemeFold(b []byte, prefix string) ([]byte, bool) {
	if len(b) < len(prefix) || !bytes.EqualFold(b[:len(prefix)], []byte(prefix)) {
		return b, false
	}
	return b[len(prefix):], true
}

// parseRequestHead reads the request head in d.buf (complete lines only).
func (d *dir) parseRequestHead() (*requestObservation, framing) {
	in := &d.c.w.strings
	method, target, _ := parseRequestLine(firstLine(d.buf))
	authority, target := absoluteForm(target)
	ro := d.c.w.requestObservation()
	req := &ro.req
	if i := bytes.IndexByte(target, '?'); i >= 0 && !d.c.w.cfg.KeepQueryStrings {
		target = redactQuery(d.c.w.scratch[:0], target, i)
		d.c.w.scratch = target[:0]
	}
	*req = Request{Method: d.c.value(slotMethod, method), Path: d.c.value(slotPath, target)}
	if authority != nil {
		req.Host, req.AbsoluteForm = d.c.value(slotHost, authority), true
	}
	f := framing{contentLength: -1}
	it := newHeaderIter(d.buf, &d.c.w.lower)
	for {
		name, value, more := it.next()
		if !more {
			break
		}
		if f.field(name, value) {
			continue
		}
		switch string(name) {
		case "host":
			if authority == nil {
				req.Host = d.c.value(slotHost, value)
			}
		case "mcp-session-id":
			if !req.HasSessionID {
				req.SessionID, req.HasSessionID = d.c.value(slotSession, value), true
			}
		case "last-event-id":
			if !req.HasLastEventID {
				req.LastEventID, req.HasLastEventID = boundedID(in, value), true
			}
		case "mcp-protocol-version":
			req.ProtocolVersion = d.c.value(slotProtocol, value)
		case "content-type":
			req.ContentType = d.c.value(slotRequestType, value)
		case "accept":
			req.Accept = d.c.value(slotAccept, value)
		case "user-agent":
			req.UserAgent = d.c.value(slotUserAgent, value)
		case "mcp-method":
			req.MCPMethod = in.str(value)
		case "mcp-name":
			req.MCPName = in.str(value)
		case "authorization":
			// Only the keyed hash leaves: the credential itself is never kept.
			req.AuthHash = hexDigest(d.c.w.peeker.digester().digest(value))
		}
		// Cookie and everything else: dropped.
	}
	if it.bad {
		d.c.w.stats.parseErrors[errBadHeader].Add(1)
	}
	req.ContentEncoding = f.coding(in)
	return ro, f
}

func (d *dir) requestHead() {
	st := d.c.w.stats
	ro, f := d.parseRequestHead()
	d.ex = d.c.newExchange(ro.req.Method)
	d.req = ro
	d.resetBody()
	d.keepBody = d.startCoding(ro.req.ContentEncoding, f.chunked || !f.badLength && !f.otherCoding && f.contentLength > 0)
	ro.req.EncodedUnread = !d.keepBody
	switch {
	case f.badLength && !f.chunked:
		st.parseErrors[errBadContentLength].Add(1)
		d.finishRequest(true)
		d.enterSync()
		return
	case f.otherCoding:
		// A request body without chunked last cannot be delimited.
		st.parseErrors[errBadTransferEncoding].Add(1)
		d.finishRequest(true)
		d.enterSync()
		return
	case f.chunked:
		d.startBody(bodyChunked, 0)
	case f.contentLength > 0:
		d.startBody(bodyLength, f.contentLength)
	default:
		d.finishRequest(false)
		d.nextMessage()
	}
}

func (d *dir) resetBody() {
	d.body = trimBuf(d.body, keptBufBytes)
	d.bodyBytes, d.bodyOver = 0, false
	d.keepBody = false
	d.events = 0
}

func (d *dir) startBody(mode uint8, length int64) {
	d.state = stBody
	d.bodyMode = mode
	d.remaining = length
	d.chunk = chSize
	d.sawCR = false
	d.buf = trimBuf(d.buf, keptBufBytes)
}

// nextMessage readies the direction for the next head on a keep-alive
// connection.
func (d *dir) nextMessage() {
	d.resetMessage()
	d.state = stSync
	d.buf = trimBuf(d.buf, keptBufBytes)
	d.skipLine = false
	d.resyncing = false
}

// finishRequest emits the request with what its body held.
func (d *dir) finishRequest(incomplete bool) {
	ro := d.req
	if ro == nil {
		return
	}
	req := &ro.req
	st := d.c.w.stats
	if req.EncodedUnread && d.bodyBytes > 0 {
		st.encodedUnread.Add(1) // not read from its start
	}
	if d.endCoding() == EndNotInflated {
		req.EncodedUnread = true // what would not inflate was not read
	}
	req.BodyBytes = d.bodyBytes
	req.BodyIncomplete = incomplete || d.bodyOver
	req.BodyTruncated = d.bodyOver
	if !req.BodyIncomplete && !req.EncodedUnread && len(d.body) > 0 {
		msgs, batch, _ := d.c.w.peeker.peekInto(ro.msg[:0], d.body)
		if HasJSONRPC(msgs) {
			req.Messages, req.Batch = msgs, batch
			st.jsonrpcMessages.Add(int64(len(msgs)))
		}
	}
	req.MCP = req.HasSessionID || req.ProtocolVersion != ""
	for i := range req.Messages {
		if m := &req.Messages[i]; m.Type == MsgRequest && m.Method == "initialize" {
			req.MCP = true
		}
	}
	st.httpExchanges.Add(1)
	if req.MCP {
		st.mcpExchanges.Add(1)
	} else {
		st.nonMCPExchanges.Add(1)
	}
	d.ex.ro = ro
	ro.obs = Observation{Kind: KindRequest, Time: d.ts, Exchange: d.ex.index, Request: req}
	d.c.emit(&ro.obs)
	d.req = nil
	if d.ex.gapEnded {
		d.c.endByGap(d.ex, d.ts)
	}
}
