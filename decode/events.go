// SSE dispatch: events decoded from a response body become observations.

package decode

import (
	"encoding/binary"
	"unsafe"
)

func (d *dir) countSSEHits() {
	st := d.c.w.stats
	if n := d.sse.LineLimitHits; n != d.sseHits[0] {
		st.lineLimitHits.Add(int64(n - d.sseHits[0]))
		d.sseHits[0] = n
	}
	if n := d.sse.EventLimitHits; n != d.sseHits[1] {
		st.eventLimitHits.Add(int64(n - d.sseHits[1]))
		d.sseHits[1] = n
	}
}

// eventObservation holds an event observation and its parts in one
// allocation: there is one per SSE event, the decoder's most common output.
// It has room for the usual single JSON-RPC message and for the data hash's
// digits, so an event costs one allocation plus its id.
type eventObservation struct {
	obs     Observation
	ev      Event
	msg     [1]Message
	hashHex [16]byte
}

// onEvent turns a dispatched SSE event into an observation.
func (d *dir) onEvent(e *SSEEvent) {
	st := d.c.w.stats
	eo := d.c.w.eventObservation()
	eo.ev = Event{
		Index:     d.events,
		ID:        e.ID,
		HasID:     e.HasID,
		Type:      e.Type,
		DataEmpty: e.DataBytes == 0,
		Retry:     e.Retry,
		DataBytes: e.DataBytes,
		DataHash:  hex64(&eo.hashHex, d.c.w.peeker.digester().keyed64(e.DataHash)),

		LastEventID:   e.LastEventID,
		DataTruncated: e.DataTruncated,
	}
	if n := d.sse.LineLimitHits; n != d.evLineHits {
		eo.ev.LineDropped = true
		d.evLineHits = n
	}
	d.events++
	st.sseEvents.Add(1)
	if !e.DataTruncated {
		msgs, _, _ := d.c.w.peeker.peekInto(eo.msg[:0], e.Data)
		if HasJSONRPC(msgs) {
			eo.ev.Messages = msgs
			st.jsonrpcMessages.Add(int64(len(msgs)))
		}
	}
	eo.obs = Observation{Kind: KindEvent, Time: d.ts, Exchange: d.ex.index, Request: d.ex.request(), Response: &d.resp.resp, Event: &eo.ev,
		reusable: d.c.w.cfg.ReuseObservations}
	d.c.emit(&eo.obs)
}

// hex64 spells h in 16 hex digits into buf and returns them as a string
// that shares buf's memory instead of copying it. buf must not be written
// again while the string is in use: it lives in the observation whose field
// holds the string (reused after delivery with Config.ReuseObservations).
func hex64(buf *[16]byte, h uint64) string {
	var raw [8]byte
	binary.BigEndian.PutUint64(raw[:], h)
	hexEncode(buf[:], raw[:])
	return unsafe.String(&buf[0], len(buf))
}
