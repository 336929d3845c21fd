package detector

import (
	"hash/maphash"
	"net/netip"
	"time"

	"github.com/replaywatch/replaywatch/decode"
)

// Proxy hops and NAT copies. A reverse proxy on the captured node (an
// ingress controller beside the MCP server's pod, a gateway on the same
// host) puts every exchange on the wire twice: client to proxy, then proxy
// to server, with the same session id, the same JSON-RPC messages and,
// when the proxy keeps the Host header, the same endpoint. So does
// destination NAT seen from both sides: a client reaching a server on the
// same node through a Service address (kube-proxy) is captured on its own
// interface before the translation and on the server's after it, the same
// socket talking to two addresses. Read as two exchanges of one session,
// every event arrives twice and every response is delivered twice. The
// second hop of a request is told by what no client's own retry has:
// another client address and another server address, or the very same
// client socket and another server address, or the address the first was
// sent to and another server address (a proxy on the client's own host),
// or (the first sent to a forward proxy, in absolute form) origin form and
// another server address, within hopWindow of the first. It is set aside whole (Stats.ProxyHops);
// the first seen, the hop nearest the client, is judged, as the spans path
// keeps the outermost span of an exchange.
const (
	// hopWindow bounds how long after the first hop the second may come:
	// a proxy forwards a request within milliseconds.
	hopWindow = time.Second
	// maxHopRequests bounds the requests remembered in a generation of
	// hopWindow (hopMemory; each about 350 bytes: an entry by print, and
	// smaller ones by print, socket and endpoint and by print and
	// endpoint; two generations are kept): past it, new requests are not
	// remembered until the next generation, so a second hop may be judged
	// as a request of its own (Stats.LimitsHit["maxHopRequests"]). It
	// bounds the proxy connections remembered (hopConns), the addresses
	// that served MCP or relayed (servingAddrs, relayAddrs), the relays'
	// runs (relayRepeats), the probes and the proved pairs (hopProbes,
	// localPairs) and the parties whose calls were set aside (hopCallers)
	// as well: past it each is forgotten whole (remember; hopCallers
	// counts every party as set aside for a while then).
	maxHopRequests = 1 << 14
	// minRelaySessionIDBytes is how long a session id must be for a
	// request carrying it to make its sender known for a proxy (a relay)
	// when nothing else ties it to the first hop. The specification asks
	// for ids that are globally unique and cryptographically secure (a
	// UUID's 36 bytes, go-sdk's 26); a server that numbers its sessions
	// (1, 2, ...) gives ids that clients of two servers share, and those
	// prove nothing.
	minRelaySessionIDBytes = 16
	// relayRepeats is how many requests without a session id in a row an
	// address must send, each repeating within the window one of another
	// client to another server at another endpoint, to be known for a relay
	// (relayEvidence). Under 2026-07-28 no request carries a session id:
	// every request of a relay is such a repeat, while a client's repeats
	// another's only when two instances of one application, started
	// together, call servers of two names in step (their requests then
	// set aside: findings lost, never gained). It is also how many answers
	// in a row must prove two server sockets a proxy's legs on the client's
	// host (hopProbe).
	relayRepeats = 2
)

// hopSeen is when a request was first seen (at: UnixNano), from which
// client address to which server socket and address, at which endpoint
// (hashes of them: no pointer for the collector to follow through maps of
// thousands).
type hopSeen struct {
	at         int64
	client     uint64
	server     uint64
	serverAddr uint64
	endpoint   uint64
	// toForwardProxy: the request was in absolute form, sent to a forward
	// proxy, whose hop may come from the client's own address (a proxy
	// on the client's host).
	toForwardProxy bool
	// repeat: the request itself repeated another client's to another
	// server (a relay's hop not yet known for one): a request repeating it
	// is no relay's evidence (relayEvidence).
	repeat bool
	key    exKey // the request's exchange
}

// copySeen is when a request was first seen from its client socket, or at
// its endpoint, from which client address and to which server socket and
// address (hashes of them): all a NAT copy, or the hop of a proxy on the
// client's host, is told by.
type copySeen struct {
	at         int64
	client     uint64
	server     uint64
	serverAddr uint64
}

// hopMemory holds the requests of one generation: those first seen within
// hopWindow of its start. Two generations are kept, the current one and
// the one before it, so every request of the last hopWindow is in one of
// them, and older ones are dropped a generation at a time: no entry is
// deleted on its own, which cost more than the lookups (a queue to expire
// them, and a map's tombstones and rehashing).
type hopMemory struct {
	start  int64 // UnixNano
	hops   map[uint64]hopSeen
	copies map[uint64]copySeen
	// local: requests by print and endpoint, for the hop of a proxy on
	// the client's own host (proxyHop), which must name the first's
	// endpoint.
	local map[uint64]copySeen
}

func newHopMemory() hopMemory {
	return hopMemory{hops: map[uint64]hopSeen{}, copies: map[uint64]copySeen{}, local: map[uint64]copySeen{}}
}

// rotateHops starts a new generation when the current one is hopWindow
// old; the one before it then holds nothing seen within hopWindow.
func (d *Detector) rotateHops(now int64) {
	cur := &d.hopGens[0]
	if now-cur.start < int64(hopWindow) {
		return
	}
	old := d.hopGens[1]
	old.clear()
	if now-cur.start >= 2*int64(hopWindow) {
		// Nothing of the current generation is within hopWindow either.
		cur.clear()
	}
	d.hopGens[1], d.hopGens[0] = *cur, old
	d.hopGens[0].start = now
}

func (m *hopMemory) clear() {
	clear(m.hops)
	clear(m.copies)
	clear(m.local)
}

// lastSeen is the newest request seen with key within hopWindow in one of
// the memory's maps (of: hopsOf, copiesOf, localOf), the current
// generation first.
func lastSeen[V interface{ seenAt() int64 }](gens *[2]hopMemory, of func(*hopMemory) map[uint64]V, key uint64, now int64) (V, bool) {
	for i := range gens {
		if v, ok := of(&gens[i])[key]; ok {
			return v, now-v.seenAt() <= int64(hopWindow)
		}
	}
	var none V
	return none, false
}

func (h hopSeen) seenAt() int64  { return h.at }
func (c copySeen) seenAt() int64 { return c.at }

// secondHop says whether ex's request is another hop of a request seen
// within hopWindow, and otherwise remembers it. Every MCP request is
// compared: under 2026-07-28 no request carries a session id, and a hop
// judged there reads as one client (the proxy's address) making every
// client's calls.
//
// The print leaves the Host out (requestPrint), since a proxy may send the
// upstream one of its own (nginx's proxy_pass does by default), but the
// two hops must also share the Host unless the second comes from an
// address that serves MCP: a proxy connecting from the address its clients
// reach (one in a pod). Otherwise clients of other servers behind the same
// path (every server's /mcp) would be taken for hops of each other:
// identical initializes, a first tools/list, and session ids of servers
// that number their sessions. Those left, two clients' identical requests
// to one endpoint from two addresses to two servers within the window are
// taken for hops and one is set aside: a finding lost, never one gained.
//
// A proxy may also connect from an address that serves no MCP (one on the
// node's own network reaches a pod from the bridge's address, not the
// node's its clients reach) and send a Host of its own: then only the
// requests tie the hops. A request that carries a long session id
// (minRelaySessionIDBytes) and repeats, within the window, one from
// another client to another server is such a proxy's: no client sends
// another's session. It is set aside, and its address is a relay from then
// on, taken for a proxy's as an address that serves MCP is.
func (d *Detector) secondHop(ex *exchange, o *decode.Observation) bool {
	now := o.Time.UnixNano()
	d.rotateHops(now)
	remember(d.servingAddrs, ex.conn.Server.Addr(), struct{}{}, &d.stats)
	// Several clients' identical requests share a print, and each
	// remembered one takes the place of the last: any of them will do for
	// a proxy's hop, but a NAT copy must find its own socket's, and the
	// hop of a proxy on the client's host one of its endpoint's, so each
	// request is remembered by its print, socket and endpoint, and by its
	// print and endpoint, too.
	print := d.requestPrint(ex)
	copyKey := maphash.Comparable(d.hashSeed, socketPrint{print, ex.conn.Client, ex.endpoint})
	localKey := maphash.Comparable(d.hashSeed, socketPrint{print: print, endpoint: ex.endpoint})
	clientAddr := ex.conn.Client.Addr()
	req := hopSeen{at: now, client: maphash.Comparable(d.hashSeed, clientAddr),
		server: maphash.Comparable(d.hashSeed, ex.conn.Server), serverAddr: maphash.Comparable(d.hashSeed, ex.conn.Server.Addr()),
		endpoint: maphash.String(d.hashSeed, ex.endpoint), toForwardProxy: o.Request != nil && o.Request.AbsoluteForm, key: ex.key}
	// Every request remembered is remembered by its print too, and the
	// newest with a print is the one hops holds: without it within the
	// window, copies and local hold none either, and most requests (those
	// carrying a session id) are the only ones with their print.
	if h, ok := lastSeen(&d.hopGens, hopsOf, print, now); ok {
		if c, ok := lastSeen(&d.hopGens, copiesOf, copyKey, now); ok && c.server != req.server {
			return d.setAside(ex, false) // a NAT copy, from the same client socket
		}
		req.repeat = h.server != req.server && h.client != req.client
		if h.server != req.server && d.proxyHop(h, req, ex, clientAddr) {
			return d.setAside(ex, h.client != req.client || h.endpoint != req.endpoint) // a proxy's hop
		}
		// From the address the same request was sent to, to another
		// server, at its endpoint: a proxy on the client's host that
		// keeps the Host; or, the two seen the other way round, the
		// client's leg to that proxy (clientsLeg).
		if c, ok := lastSeen(&d.hopGens, localOf, localKey, now); ok && c.server != req.server && (c.serverAddr == req.client || clientsLeg(c.client, req)) {
			return d.setAside(ex, c.client != req.client)
		}
	}
	if !req.repeat && len(d.relayRepeats) > 0 {
		delete(d.relayRepeats, clientAddr) // not a relay's run
	}
	// A first hop, or the same client again (a retry, judged as such):
	// its own second hop is to come.
	cur := &d.hopGens[0]
	if len(cur.hops) >= maxHopRequests || len(cur.copies) >= maxHopRequests || len(cur.local) >= maxHopRequests {
		d.stats.LimitsHit["maxHopRequests"]++
		return false
	}
	cur.hops[print] = req
	seen := copySeen{at: now, client: req.client, server: req.server, serverAddr: req.serverAddr}
	cur.copies[copyKey] = seen
	cur.local[localKey] = seen
	return false
}

func hopsOf(m *hopMemory) map[uint64]hopSeen    { return m.hops }
func copiesOf(m *hopMemory) map[uint64]copySeen { return m.copies }
func localOf(m *hopMemory) map[uint64]copySeen  { return m.local }

// proxyHop says whether ex, which repeats the request h to another server,
// is a proxy's hop of it. From another client address, it is when a proxy
// sends it (proxySends). From the same address, it is a retry, judged as
// such, but for two cases. A client that sent a request to a forward proxy
// sends its retries there too, in absolute form: the same request in
// origin form is the proxy's hop, whatever address it comes from. And a
// proxy on the client's own host (an nginx in front of a server, captured
// on loopback) sends it from the address the first was sent to, which no
// retry comes from; but so does a client of several servers on its own
// host, whose identical initializes (or 2026-07-28 requests) go to each:
// from there a hop must name the first's endpoint (a proxy that keeps the
// Host: secondHop looks that up by endpoint) or carry a long session id
// (minRelaySessionIDBytes), which a client sends to one server only. A
// proxy there with a Host of its own then judges its initialize again, and
// the session that began is dropped (dropRelayCopy). Without a session id
// (its initialize, every request under 2026-07-28) the answers tell, once:
// localProxyHop. req is what ex's request is remembered by, sent from addr.
func (d *Detector) proxyHop(h, req hopSeen, ex *exchange, addr netip.Addr) bool {
	switch {
	case h.client != req.client || h.toForwardProxy && !req.toForwardProxy:
		return d.proxySends(h, req, ex, addr)
	case h.serverAddr == req.client && len(ex.reqSession) >= minRelaySessionIDBytes:
		d.dropRelayCopy(h, req, ex, addr)
		return true
	case h.serverAddr == req.client && h.endpoint != req.endpoint:
		return d.localProxyHop(h, req, ex)
	case clientsLeg(h.client, req) && len(ex.reqSession) >= minRelaySessionIDBytes:
		return true
	}
	return false
}

// clientsLeg says whether req, which repeats a request sent from the
// address whose hash is first to another server, is the client's leg of a
// proxy on the client's host that was seen after the proxy's own hop: sent
// from that address to that address (the proxy listens where its clients
// are). A capture on one host never shows the proxy's hop first, since the
// proxy forwards what it has received; captures of two hosts read
// together do, when the server's host's clock is behind the client's by
// more than the proxy takes: the hop's first copy is then the server
// host's. The hop was judged; the client's leg is set aside, at the hop's
// endpoint (a proxy that keeps the Host), or at its own when it carries a
// long session id, which a client sends to one server only: the answers'
// proof localProxyHop waits for cannot be had once the hop's answer came
// first, so a request without one (an initialize) is judged as the
// client's own. What a client of two servers on its host sends the second,
// when it sent the first from its address to another host's, is set aside
// then: findings lost, never gained.
func clientsLeg(first uint64, req hopSeen) bool {
	return first == req.client && req.serverAddr == req.client
}

// hopProbe is a request (hop) from the address another (the first) was
// sent to, repeating it to another server at another endpoint without a
// long session id: the hop of a proxy on the client's host with a Host of
// its own, or a client of two servers on its host. A proxy's hop is
// answered first, and the proxy passes that very answer on: when the
// first's first answer (its status, session id and first event or body)
// is the hop's, which came before it, relayRepeats times in a row, the two
// server sockets (pair) are a proxy's legs from then on; one answer that
// differs proves they are not. A client of two servers gets each one's
// answers, which differ at least in the server's name; two replicas of
// one server may answer alike throughout, and the later requests to the
// second that repeat one to the first within the window are then set
// aside: findings lost, never gained.
type hopProbe struct {
	hop    exKey
	pair   uint64
	answer uint64 // the print of the hop's first answer; 0 until it came
}

// localProxyHop says whether ex (req), which repeats h to another server
// at another endpoint from the address h was sent to, is the hop of a
// proxy whose legs the answers proved (hopProbe); if they have not, it is
// probed.
func (d *Detector) localProxyHop(h, req hopSeen, ex *exchange) bool {
	pair := maphash.Comparable(d.hashSeed, [2]uint64{h.server, req.server})
	if n := d.localPairs[pair]; n >= relayRepeats {
		return true
	} else if n < 0 {
		return false // the answers differed once: no proxy's legs
	}
	if _, open := d.exchanges[h.key]; !open {
		return false // answered and ended already: no proxy's hop
	}
	remember(d.hopProbes, h.key, hopProbe{hop: ex.key, pair: pair}, &d.stats)
	ex.probeOf, ex.probing = h.key, true
	return false
}

// probeAnswer notes the first answer (an event or a body, o) of an
// exchange probed as a proxy's hop, and compares the first answer of the
// exchange it may repeat with it (hopProbe).
func (d *Detector) probeAnswer(ex *exchange, o *decode.Observation) {
	if ex.probing {
		ex.probing = false
		if p, ok := d.hopProbes[ex.probeOf]; ok && p.hop == ex.key && p.answer == 0 {
			p.answer = d.answerPrint(ex, o)
			d.hopProbes[ex.probeOf] = p
		}
		return
	}
	p, ok := d.hopProbes[ex.key]
	if !ok {
		return
	}
	delete(d.hopProbes, ex.key)
	if p.answer == 0 {
		return // the hop was not answered first, or its answer was lost: no word
	}
	n := d.localPairs[p.pair]
	if n < 0 {
		return
	}
	if p.answer == d.answerPrint(ex, o) {
		n++
	} else {
		n = -1
	}
	remember(d.localPairs, p.pair, n, &d.stats)
}

// answerPrint hashes what a proxy passes on of an exchange's first answer
// o: the status, the session id, and the event (its id and data) or the
// body (its length and first message). Never 0.
func (d *Detector) answerPrint(ex *exchange, o *decode.Observation) uint64 {
	a := answerSeen{status: ex.status, session: ex.respSession}
	switch {
	case o.Event != nil:
		a.id, a.data = o.Event.ID, o.Event.DataHash
	case o.Body != nil:
		a.bytes = o.Body.Bytes
		if len(o.Body.Messages) > 0 {
			m := o.Body.Messages[0]
			a.id, a.data = m.ID, m.Method
		}
	}
	return maphash.Comparable(d.hashSeed, a) | 1
}

// answerSeen is what answerPrint hashes.
type answerSeen struct {
	status   int
	session  string
	id, data string
	bytes    int64
}

// proxySends says whether ex, which repeats the request h from another
// socket to another server, comes from a proxy: one that keeps the Host,
// one that connects from an address serving MCP, or a relay (secondHop).
// A relay's own copy of a session its hop names, begun by an initialize
// forwarded before the relay was known, is dropped (dropRelayCopy).
func (d *Detector) proxySends(h, req hopSeen, ex *exchange, addr netip.Addr) bool {
	if h.endpoint == req.endpoint || hasAddr(d.servingAddrs, addr) {
		return true
	}
	if !hasAddr(d.relayAddrs, addr) {
		if h.client == req.client || !d.relayEvidence(h, ex, addr) {
			return false
		}
		remember(d.relayAddrs, addr, struct{}{}, &d.stats)
		delete(d.relayRepeats, addr)
	}
	d.dropRelayCopy(h, req, ex, addr)
	return true
}

// relayEvidence says whether ex, which repeats h, another client's request
// to another server at another endpoint, makes its sender (addr) known for
// a relay: at once when it carries a long session id, which no client
// sends to another's server; after relayRepeats such requests in a row
// when it carries none. A short session id (a server numbering its
// sessions) proves nothing and counts for nothing; nor does repeating a
// request that was itself a repeat: clients behind one address (a crowd)
// send identical initializes one after another, each then repeating the
// relay's hop of the one before, and would be taken for the relay.
func (d *Detector) relayEvidence(h hopSeen, ex *exchange, addr netip.Addr) bool {
	switch {
	case len(ex.reqSession) >= minRelaySessionIDBytes:
		return true
	case ex.reqSession != "" || h.repeat:
		return false
	}
	n := d.relayRepeats[addr] + 1
	if n >= relayRepeats {
		return true
	}
	remember(d.relayRepeats, addr, n, &d.stats)
	return false
}

// dropRelayCopy drops the session a relay's hop ex names at its own
// endpoint (another than h's, the first hop's: there the session is the
// client's), when the relay began it and nothing was found in it: its
// initialize was judged before the hop was known for one, so the client's
// session was judged twice, and the copy's record would count it twice,
// with the relay's address for its client (a relay, or a proxy on the
// client's host with a Host of its own, whose address is the client's). A
// copy with findings keeps its record, which they name.
func (d *Detector) dropRelayCopy(h, req hopSeen, ex *exchange, addr netip.Addr) {
	if ex.reqSession == "" || req.endpoint == h.endpoint {
		return // at the first's endpoint the session is the client's own
	}
	s, ok := d.sessions[sessionKey(ex.endpoint, ex.reqSession)]
	if !ok || s.client.Addr() != addr || s.violations > 0 {
		return
	}
	s.relayCopy = true
	d.removeSession(s, "relayed")
}

// socketPrint is a request's print with the client socket that sent it
// and its endpoint.
type socketPrint struct {
	print    uint64
	client   netip.AddrPort
	endpoint string
}

// setAside counts ex's request as a second hop and remembers its
// connection for a proxy's (or a NAT copy's): answers on it that the
// capture did not pair are set aside too (onHopConn). When it comes from
// another address than the request it repeats, or to another endpoint
// (fromOther), the parties of its tools/calls are remembered too: what is
// set aside is never a habit of theirs, and a client taken for a proxy
// (instances of one application polling in step, behind one endpoint or
// started together, or two on one host) would have its habit hidden, its
// re-issue then flagged although it makes the call over and over
// (noteBrokenCall). From the same address to the same endpoint (a NAT copy,
// a proxy on the client's own host that keeps the Host), the first is the
// client's, judged, habit and all.
func (d *Detector) setAside(ex *exchange, fromOther bool) bool {
	d.stats.ProxyHops++
	// Past the limit they are all forgotten: a proxy connection still in
	// use is remembered again at its next second hop.
	remember(d.hopConns, ex.conn.ID, struct{}{}, &d.stats)
	if !fromOther {
		return true
	}
	if ex.reqSession != "" {
		d.noteSessionCallsAside(ex)
		return true
	}
	for i := range ex.msgs {
		m := &ex.msgs[i]
		if m.Type != decode.MsgRequest || m.Method != "tools/call" {
			continue
		}
		k := d.hopCallerKey(ex, m)
		if _, ok := d.hopCallers[k]; !ok && len(d.hopCallers) >= maxHopRequests {
			// Forgotten, every party counts as set aside until the
			// forgotten times are past.
			clear(d.hopCallers)
			d.hopCallersForgot = ex.start.UnixNano()
			d.stats.LimitsHit["maxHopRequests"]++
		}
		d.hopCallers[k] = ex.start.UnixNano()
	}
	return true
}

// noteSessionCallsAside notes the tools/calls of ex, set aside, in the
// session ex names when ex comes from that session's own client address:
// the session's habit of those calls may be unseen (checkReinit,
// checkSessionReissue). A proxy's hop of a client's session comes from the
// proxy's address, and marks nothing there.
func (d *Detector) noteSessionCallsAside(ex *exchange) {
	s := d.sessions[sessionKey(ex.endpoint, ex.reqSession)]
	if s == nil || s.removed || s.client.Addr() != ex.conn.Client.Addr() {
		return
	}
	for i := range ex.msgs {
		m := &ex.msgs[i]
		if m.Type != decode.MsgRequest || m.Method != "tools/call" {
			continue
		}
		k := toolKey{m.Tool, m.ParamsHash}
		if _, ok := s.callsAside[k]; ok || len(s.callsAside) >= decode.MaxAnnotatedTools {
			continue
		}
		if s.callsAside == nil {
			s.callsAside = map[toolKey]struct{}{}
		}
		s.callsAside[k] = struct{}{}
		d.charge(s, entryBytes+int64(len(k.tool)+len(k.paramsHash)))
	}
}

// callAside says whether s's identical call (m's tool and arguments) was
// set aside as a proxy's hop, or may have been (the marks full).
func (s *session) callAside(m *decode.Message) bool {
	if len(s.callsAside) >= decode.MaxAnnotatedTools {
		return true
	}
	_, ok := s.callsAside[toolKey{m.Tool, m.ParamsHash}]
	return ok
}

// hopCallerKey is the key of m's party at ex's endpoint in hopCallers.
func (d *Detector) hopCallerKey(ex *exchange, m *decode.Message) uint64 {
	return d.serverEventKey(ex.endpoint, "aside\x00"+ex.partyKey(m))
}

// callsSetAside says whether a tools/call of m's party at ex's endpoint was
// set aside as a hop since then, or may have been, forgotten at the limit.
// Only the last time is kept, so one set aside after ex's request counts
// too: it may have replaced a time before, and a client whose calls are
// set aside at all is one whose habit may be hidden (findings lost, never
// gained).
func (d *Detector) callsSetAside(ex *exchange, m *decode.Message, since time.Time) bool {
	if d.hopCallersForgot != 0 && d.hopCallersForgot >= since.UnixNano() {
		return true
	}
	at, ok := d.hopCallers[d.hopCallerKey(ex, m)]
	return ok && at >= since.UnixNano()
}

// remember sets m[k] to v. Like every hop memory, m holds at most
// maxHopRequests entries: past it, all are forgotten, and that is counted.
func remember[K, V comparable](m map[K]V, k K, v V, st *Stats) {
	old, ok := m[k]
	switch {
	case ok && old == v:
		return
	case !ok && len(m) >= maxHopRequests:
		clear(m)
		st.LimitsHit["maxHopRequests"]++
	}
	m[k] = v
}

func hasAddr(set map[netip.Addr]struct{}, addr netip.Addr) bool {
	_, ok := set[addr]
	return ok
}

// onHopConn says whether conn carried a second hop: it is a proxy's
// connection to the server, and an answer on it whose request the capture
// did not pair (lost bytes, a capture begun late) is a second hop too.
func (d *Detector) onHopConn(conn uint64) bool {
	_, ok := d.hopConns[conn]
	return ok
}

// requestPrint hashes what a proxy forwards unchanged, its Host aside:
// method, path, session id, Last-Event-ID and the JSON-RPC messages.
func (d *Detector) requestPrint(ex *exchange) uint64 {
	var h maphash.Hash
	h.SetSeed(d.hashSeed)
	for _, s := range [...]string{ex.method, ex.path, ex.reqSession, ex.cursor} {
		h.WriteString(s)
		h.WriteByte(0)
	}
	if ex.hasCursor {
		h.WriteByte(1)
	}
	for i := range ex.msgs {
		m := &ex.msgs[i]
		h.WriteByte(byte(m.Type))
		for _, s := range [...]string{m.ID, m.Method, m.ParamsHash, m.CancelledID} {
			h.WriteString(s)
			h.WriteByte(0)
		}
	}
	return h.Sum64()
}

// noteHopAnswer reads what the answer to a request set aside as a proxy's
// hop says of its server's tools: a tools/list answer is that server's word
// on them, whoever asked, and a re-issue at the endpoint is graded on it.
// The rest of a hop is its first hop's, judged there. A client taken for a
// relay (two instances of one application started together against
// servers of their own send the same first requests) has its own tools/list
// set aside, and its re-issues would otherwise stay unverifiable ("tool
// annotations not seen").
func (d *Detector) noteHopAnswer(ex *exchange, o *decode.Observation) {
	var msgs []decode.Message
	switch {
	case o.Body != nil:
		msgs = o.Body.Messages
	case o.Event != nil:
		msgs = o.Event.Messages
	}
	for i := range msgs {
		if m := &msgs[i]; m.Type == decode.MsgResponse && m.Tools != "" {
			d.noteToolAnnotations(ex.endpoint, m.Tools)
		}
	}
}

// hopConnGap: bytes lost on a connection that carried a request set aside
// as a hop may have held any session's requests of its client address and
// server (pairGaps.hiding). What was set aside there was followed no
// further, its lost answers and requests marked no session, and it may be
// no proxy's: a replica's own initialize in step with another replica's,
// whose session goes on judged from its later requests on other
// connections of the pair (a swap of it would otherwise rest on a DELETE
// the lost bytes may hold). A true proxy's connection marks the proxy's
// own pair, where its clients' sessions are not judged: nothing is lost
// there.
func (d *Detector) hopConnGap(o *decode.Observation) {
	if d.onHopConn(o.Conn.ID) {
		g := d.noteGap(o.Conn, o.Time)
		g.hiding = later(g.hiding, o.Time)
	}
}
