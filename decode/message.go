// The end of a message or response: complete, cut short or aborted.

package decode

// messageDone completes the message whose framing just ended.
func (d *dir) messageDone() {
	if d.role == roleClient {
		d.finishRequest(false)
	} else {
		d.endResponse(EndClean, true)
	}
	d.nextMessage()
}

// endResponse emits the body (when it held JSON-RPC) and the End. framed
// says the body's own framing ended it (the last chunk, the whole length);
// else the connection did (FIN, reset, a gap).
func (d *dir) endResponse(how EndHow, framed bool) {
	ro := d.resp
	if ro == nil {
		return
	}
	resp := &ro.resp
	w := d.c.w
	st := w.stats
	eo := w.endObservation()
	end := &eo.end
	end.How = how
	end.ClientClosed = d.c.clientFin
	if resp.EncodedUnread && d.bodyBytes > 0 {
		st.encodedUnread.Add(1) // not read from its start
	}
	// The inflater first: what it still holds is the stream's last bytes.
	codingLimit := d.endCoding()
	if d.sseOn {
		if d.sse.MidEvent() {
			if how == EndClean {
				end.How = EndTruncated
			}
			end.CutMidEvent = !framed
			end.PartialID, end.HasPartialID = d.sse.PartialID()
		}
		end.LastID, end.HasLastID = d.sse.LastEventID()
		end.Events = d.events
		switch {
		case d.sse.LineLimitHits > 0:
			d.limit = "MaxSSELineBytes"
		case d.sse.EventLimitHits > 0:
			d.limit = "MaxEventBytes"
		}
	} else if d.bodyOver {
		d.limit = "MaxBodyBytes"
	} else if how == EndClean && len(d.body) > 0 && !d.bodyOver {
		bo := w.bodyObservation()
		msgs, batch, _ := w.peeker.peekInto(bo.msg[:0], d.body)
		if HasJSONRPC(msgs) {
			st.jsonrpcMessages.Add(int64(len(msgs)))
			bo.body = Body{Messages: msgs, Batch: batch, Bytes: d.bodyBytes}
			bo.obs = Observation{Kind: KindBody, Time: d.ts, Exchange: d.ex.index, Request: d.ex.request(), Response: resp, Body: &bo.body,
				reusable: w.cfg.ReuseObservations}
			d.c.emit(&bo.obs)
		} else if w.cfg.ReuseObservations {
			w.dropBody(bo)
		}
	}
	if codingLimit != "" {
		d.limit = codingLimit // the rest of the body was not read at all
	}
	end.Limit = d.limit
	eo.obs = Observation{Kind: KindEnd, Time: d.ts, Exchange: d.ex.index, End: end}
	d.c.emitEnd(eo, d.ex, ro)
	d.resp = nil
}

// emitEnd emits the End of exchange ex and of its response ro (nil when
// none was seen). The End takes the exchange's request: no later
// observation points to the request or the response, so both are reused
// with the End (when the pipeline reuses observations), and a second End
// could not take the request too.
func (c *conn) emitEnd(eo *endObservation, ex *exchange, ro *responseObservation) {
	eo.obs.Request = ex.request()
	if ro != nil {
		eo.obs.Response = &ro.resp
	}
	if c.w.cfg.ReuseObservations {
		eo.obs.reusable = true
		eo.req, eo.resp = ex.ro, ro
	}
	ex.ro = nil
	c.emit(&eo.obs)
}

// endObservation and bodyObservation hold an observation and its part in
// one allocation, a body with room for the usual single message. An end
// holds its exchange's request and response too when they are reused
// (release).
type endObservation struct {
	obs  Observation
	end  End
	req  *requestObservation
	resp *responseObservation
}

type bodyObservation struct {
	obs  Observation
	body Body
	msg  [1]Message
}

// abort ends whatever message is open in this direction with how.
func (d *dir) abort(how EndHow) {
	switch d.state {
	case stBody:
		if d.role == roleClient {
			d.finishRequest(true)
		} else {
			d.endResponse(how, false)
		}
	}
}

// finish handles the end of a direction's bytes (FIN or close). A body
// delimited by close ends cleanly; any other body was cut, except that an
// event stream is judged by its events: FIN at an event boundary lost
// nothing (endResponse turns a FIN inside an event into truncated).
func (d *dir) finish(how EndHow) {
	if d.state != stBody {
		return
	}
	if how == EndClean && d.bodyMode != bodyClose && !d.sseOn {
		how = EndTruncated
	}
	d.abort(how)
	d.resetMessage()
}
