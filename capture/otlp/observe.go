// From one HTTP span to the observations of one exchange.

package otlp

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/replaywatch/replaywatch/decode"
)

// observe is the exchange h describes, on a connection of its own (a span
// says nothing of connections): its request, response head, SSE events or
// JSON body, and end, in that order and time.
//
// What the span does not show is never made up: a request whose JSON-RPC
// content is unknown is marked incomplete; a response whose body the
// emitter did not record ends with a gap, so the checks that need its
// events are unverifiable; a request that got no response (a transport
// error: it may never have reached the server) gives nothing at all.
func observe(h *httpSpan, connID uint64) []*decode.Observation {
	if h.status == 0 {
		return nil
	}
	conn := decode.Conn{ID: connID, Client: h.clientAddr, Server: h.serverAddr, StartSeen: true}
	req := &decode.Request{
		Method: h.method, Path: h.path, Host: h.host,
		SessionID: h.reqSession, HasSessionID: h.hasReqSession,
		LastEventID: h.lastEventID, HasLastEventID: h.hasLastEventID,
		ProtocolVersion: h.protocol, UserAgent: h.userAgent,
	}
	if h.rpc.known() {
		m := decode.Message{Type: decode.MsgNotification, Method: h.rpc.method, ID: h.rpc.id}
		if h.rpc.id != "" {
			m.Type = decode.MsgRequest
			m.Tool = h.rpc.tool
			m.ParamsHash = h.rpc.identity
		}
		if m.Method == "initialize" {
			m.ProtocolVersion = h.rpc.protocol
		}
		m.ClientInfo, m.ProgressToken = h.rpc.clientInfo, h.rpc.progressToken
		req.Messages = []decode.Message{m}
	} else if h.method == "POST" {
		req.BodyIncomplete = true // what it carried is not in the span
	}
	req.MCP = req.HasSessionID || req.ProtocolVersion != "" || h.rpc.known()
	resp := &decode.Response{
		Status: h.status, SessionID: h.respSession, HasSessionID: h.hasRespSession,
		ContentType: h.contentType, SSE: h.eventStream(),
		ContentLength: -1,
	}
	at := h.start
	obs := []*decode.Observation{
		{Kind: decode.KindRequest, Time: at, Conn: conn, Exchange: 1, Request: req},
	}
	next := func(t time.Time) time.Time {
		// Each observation at or after the one before it.
		if t.Before(at) {
			t = at
		}
		at = t
		return t
	}
	obs = append(obs, &decode.Observation{Kind: decode.KindResponse, Time: next(h.start.Add(time.Microsecond)), Conn: conn, Exchange: 1, Request: req, Response: resp})
	end := &decode.End{How: decode.EndClean}
	switch {
	case resp.SSE && h.recorded:
		obs = appendEvents(obs, h, conn, req, resp, end, next)
		end.How = endHow(h.endHow)
		end.ClientClosed = h.cliClosed
	case resp.SSE:
		end.How = decode.EndGap // the stream's content is unknown
	case len(h.bodyMsgs) > 0:
		obs = append(obs, &decode.Observation{Kind: decode.KindBody, Time: next(h.end), Conn: conn, Exchange: 1,
			Request: req, Response: resp, Body: &decode.Body{Messages: h.bodyMsgs}})
	case h.status/100 == 2 && h.status != 202 && h.status != 204 && !h.emptyBody:
		// A body (JSON, or a stream whose content type was not
		// captured) the span does not show.
		end.How = decode.EndGap
	}
	endAt := h.end
	if !h.endAt.IsZero() {
		endAt = h.endAt
	}
	obs = append(obs, &decode.Observation{Kind: decode.KindEnd, Time: next(endAt), Conn: conn, Exchange: 1, Request: req, Response: resp, End: end})
	return obs
}

// appendEvents adds the stream's complete events and notes its partial one.
func appendEvents(obs []*decode.Observation, h *httpSpan, conn decode.Conn, req *decode.Request, resp *decode.Response, end *decode.End, next func(time.Time) time.Time) []*decode.Observation {
	var last string
	var hasLast bool
	for _, e := range h.events {
		if e.partial {
			end.PartialID, end.HasPartialID = e.id, e.hasID
			continue
		}
		id := e.id // bounded when the span was read
		if e.hasID {
			last, hasLast = id, true
		}
		ev := &decode.Event{
			Index: end.Events, ID: id, HasID: e.hasID, Type: e.typ, DataEmpty: e.size == 0, Retry: -1,
			DataBytes: e.size, DataHash: e.hash, LastEventID: last,
		}
		if ev.DataHash == "" {
			ev.DataHash = fingerprint(e)
		}
		if e.hasMsg {
			ev.Messages = []decode.Message{e.msg}
		}
		end.Events++
		obs = append(obs, &decode.Observation{Kind: decode.KindEvent, Time: next(e.at), Conn: conn, Exchange: 1, Request: req, Response: resp, Event: ev})
	}
	end.LastID, end.HasLastID = last, hasLast
	return obs
}

// fingerprint stands for an event's data when the emitter gave no hash of
// it: its size and the message it carried. The same event replayed gives
// the same fingerprint; different events under one id almost always differ.
func fingerprint(e sseEvent) string {
	var b strings.Builder
	b.WriteString("size=" + strconv.Itoa(e.size) + " type=" + e.typ)
	if e.hasMsg {
		b.WriteString(" msg=" + e.msg.Type.String() + " id=" + e.msg.ID + " method=" + e.msg.Method + " token=" + e.msg.ProgressToken)
		if e.msg.HasProgress {
			b.WriteString(" progress=" + strconv.FormatFloat(e.msg.Progress, 'g', -1, 64))
		}
		if e.msg.HasTotal {
			b.WriteString(" total=" + strconv.FormatFloat(e.msg.ProgressTotal, 'g', -1, 64))
		}
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:8])
}

// endHow reads mcp.sse.end.how; absent or unknown values leave the
// stream's end unknown rather than claim it ended well or badly.
func endHow(s string) decode.EndHow {
	switch s {
	case "clean":
		return decode.EndClean
	case "truncated":
		return decode.EndTruncated
	case "reset":
		return decode.EndReset
	}
	return decode.EndUnknown
}
