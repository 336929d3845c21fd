// Bodies: length, chunked and until-close framing, and payload collection.

package decode

// bodyBytesIn consumes body framing and hands the payload on.
func (d *dir) bodyBytesIn(p []byte) []byte {
	switch d.bodyMode {
	case bodyClose:
		d.payload(p)
		return nil
	case bodyLength:
		n := int64(len(p))
		if n > d.remaining {
			n = d.remaining
		}
		d.payload(p[:n])
		d.remaining -= n
		if d.remaining == 0 {
			d.messageDone()
		}
		return p[n:]
	}
	return d.chunked(p)
}

func (d *dir) chunked(p []byte) []byte {
	st := d.c.w.stats
	for len(p) > 0 && d.state == stBody {
		switch d.chunk {
		case chSize:
			seg, rest, complete := cutLine(p)
			if len(d.buf)+len(seg) > MaxChunkLineBytes {
				st.parseErrors[errBadChunk].Add(1)
				consumed := len(d.buf)
				d.limit = "MaxChunkLineBytes"
				d.framingError()
				return d.skipLineAfterError(consumed, seg, rest, complete)
			}
			d.buf = append(d.buf, seg...)
			if !complete {
				return nil
			}
			p = rest
			n, ok := parseChunkSize(d.buf)
			d.buf = d.buf[:0]
			if !ok {
				st.parseErrors[errBadChunk].Add(1)
				d.framingError()
				return p
			}
			if n == 0 {
				d.chunk = chTrailer
				d.lineLen = 0
			} else {
				d.chunk, d.remaining = chData, n
			}
		case chData:
			n := int64(len(p))
			if n > d.remaining {
				n = d.remaining
			}
			d.payload(p[:n])
			d.remaining -= n
			p = p[n:]
			if d.remaining == 0 {
				d.chunk, d.sawCR = chDataEnd, false
			}
		case chDataEnd:
			c := p[0]
			if c == '\r' && !d.sawCR {
				d.sawCR = true
				p = p[1:]
				continue
			}
			if c != '\n' {
				st.parseErrors[errBadChunk].Add(1)
				d.framingError()
				return p
			}
			p = p[1:]
			d.chunk = chSize
		case chTrailer:
			// Trailer fields are read and dropped; they are bounded like a
			// head.
			seg, rest, complete := cutLine(p)
			d.remaining += int64(len(seg))
			if d.remaining > int64(d.c.w.cfg.MaxHeaderBytes) {
				st.headerLimitHits.Add(1)
				consumed := d.lineLen
				d.limit = "MaxHeaderBytes"
				d.framingError()
				return d.skipLineAfterError(consumed, seg, rest, complete)
			}
			p = rest
			if d.trackLine(seg) {
				d.messageDone()
			}
		}
	}
	return p
}

// skipLineAfterError skips the line a limit cut, whole: the consumed bytes
// of it that came before seg and seg itself are counted as skipped, and
// the rest of the line (when seg did not end it) is skipped too, so the
// outcome does not depend on where TCP split the line.
func (d *dir) skipLineAfterError(consumed int, seg, rest []byte, complete bool) []byte {
	d.c.w.stats.resyncSkippedBytes.Add(int64(consumed))
	d.skipped(nil, seg)
	d.skipLine = !complete
	return rest
}

// framingError ends the message as cut and looks for the next start line.
func (d *dir) framingError() {
	d.abort(EndTruncated)
	d.enterSync()
}

// payload takes body bytes after framing.
func (d *dir) payload(b []byte) {
	if len(b) == 0 {
		return
	}
	d.bodyBytes += int64(len(b))
	if d.inflate != nil {
		d.inflate.write(b, d.plain)
		return
	}
	d.readPlain(b)
}

// readPlain reads body bytes as they are (inflated, when the body was
// compressed): SSE, or kept for the JSON-RPC peek.
func (d *dir) readPlain(b []byte) {
	if d.sseOn {
		d.sse.Write(b)
		d.countSSEHits()
		return
	}
	if !d.keepBody || d.bodyOver {
		return
	}
	if len(d.body)+len(b) > d.c.w.cfg.MaxBodyBytes {
		d.bodyOver = true
		d.body = d.body[:0]
		d.c.w.stats.bodyLimitHits.Add(1)
		return
	}
	if d.body == nil {
		d.body = d.c.w.getBuf()
	}
	d.body = append(d.body, b...)
}
