// Responses: the head, its framing and the response observation.

package decode

import (
	"strings"
)

// responseObservation holds a response head and its observation in one
// allocation.
type responseObservation struct {
	obs  Observation
	resp Response
}

// parseResponseHead reads the response head in d.buf (complete lines only).
func (d *dir) parseResponseHead() (*responseObservation, framing) {
	status, _ := parseStatusLine(firstLine(d.buf))
	ro := d.c.w.responseObservation()
	resp := &ro.resp
	*resp = Response{Status: status, ContentLength: -1}
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
		case "mcp-session-id":
			if !resp.HasSessionID {
				resp.SessionID, resp.HasSessionID = d.c.value(slotSession, value), true
			}
		case "content-type":
			resp.ContentType = d.c.value(slotResponseType, value)
		case "mcp-protocol-version":
			resp.ProtocolVersion = d.c.value(slotProtocol, value)
		}
	}
	if it.bad {
		d.c.w.stats.parseErrors[errBadHeader].Add(1)
	}
	resp.ContentEncoding = f.coding(&d.c.w.strings)
	resp.SSE = mediaTypeIs(resp.ContentType, "text/event-stream")
	resp.Chunked = f.chunked
	if !f.badLength {
		resp.ContentLength = f.contentLength
	}
	return ro, f
}

// emitResponse emits the response head of the exchange d.ex.
func (d *dir) emitResponse(ro *responseObservation) {
	ex := d.ex
	if d.c.overflowed {
		// Pairing may be shifted by the forgotten request; it is right
		// again after a response that found no request waiting.
		ro.resp.PipelineOverflow = true
		d.c.overflowed = ex.ro != nil
	}
	ro.obs = Observation{Kind: KindResponse, Time: d.ts, Exchange: ex.index, Request: ex.request(), Response: &ro.resp}
	d.c.emit(&ro.obs)
}

func (d *dir) responseHead() {
	st := d.c.w.stats
	ro, f := d.parseResponseHead()
	resp := &ro.resp
	status := resp.Status
	if status < 200 {
		if status == 101 {
			// Switching protocols: what follows is not HTTP/1.x.
			if d.upgradesToH2C() {
				d.c.switchToHTTP2(d.ts)
			} else {
				d.c.giveUp()
			}
			return
		}
		// Interim responses are not paired with the request.
		d.nextMessage()
		return
	}
	ex := d.c.popExchange(d.ts)
	if cl := d.c.dir(!d.fromA); cl.ex == ex && cl.req != nil {
		// Answered before its body ended (RFC 9112 allows it: a 404 or
		// 401 decided on the head, a 413): the request goes first, its
		// body unread, and the rest of the body is skipped as it comes.
		cl.req.req.AnsweredEarly = true
		cl.keepBody = false
		cl.dropCoding() // what it inflated so far is not read either
		cl.finishRequest(true)
	}
	if ex.method == "" {
		// No request head was seen for it (popExchange): on a
		// connection picked up again, its request came before the
		// let-go.
		d.c.pickedUpUnread(d)
	}
	d.ex, d.resp = ex, ro
	d.resetBody()
	noBody := ex.method == "HEAD" || status == 204 || status == 304
	if ex.method == "CONNECT" && status < 300 {
		d.emitResponse(ro)
		d.c.giveUp()
		return
	}
	if resp.SSE && !noBody {
		st.sseStreams.Add(1)
		if req := ex.request(); req != nil && !req.MCP {
			st.nonMCPSSEStreams.Add(1)
		}
	}
	hasBody := !noBody && (f.chunked || !f.badLength && f.contentLength != 0)
	resp.EncodedUnread = !d.startCoding(resp.ContentEncoding, hasBody)
	switch {
	case noBody:
	case resp.EncodedUnread:
		// Compressed, most likely: the body is delimited by its framing
		// and counted, but its bytes are not SSE or JSON text.
	case resp.SSE:
		if d.sse == nil {
			d.sse = d.c.w.getSSE(d.onEvent)
		} else {
			d.sse.Reset()
		}
		d.sseHits = [2]int{}
		d.evLineHits = 0
		d.sseOn = true
	default:
		ct := resp.ContentType
		d.keepBody = ct == "" || strings.Contains(strings.ToLower(ct), "json")
	}
	d.emitResponse(ro)
	switch {
	case noBody:
		d.messageDone()
	case f.badLength && !f.chunked:
		st.parseErrors[errBadContentLength].Add(1)
		d.endResponse(EndTruncated, false)
		d.enterSync()
	case f.chunked:
		d.startBody(bodyChunked, 0)
	case f.contentLength == 0:
		d.messageDone()
	case f.contentLength > 0:
		d.startBody(bodyLength, f.contentLength)
	default:
		d.startBody(bodyClose, 0)
	}
}
