// A TypeScript MCP server (the real @modelcontextprotocol/sdk Streamable HTTP
// transport with the SDK's example InMemoryEventStore, one store per session
// as in the SDK's simpleStreamableHttp example) that the Go fixture generator
// puts behind its recording proxy.
//
// Usage: node server.mjs '<json config>'
//   config.retryInterval  ms sent as `retry:` in priming events (polling servers)
//   config.permissive     instead of 404 for an unknown Mcp-Session-Id, mint a
//                         new session, rewrite the request's session header and
//                         serve it (the faulty "transparent recovery" of a
//                         drained deployment; deliberately broken backend)
//   config.legacyRouting  answer an unknown Mcp-Session-Id with 400 "Bad Request:
//                         No valid session ID provided", as the stateful routing
//                         in the SDK's README up to 1.23 did (copied by many
//                         servers), instead of 404: clients never re-initialise
//   config.noEventStore   no event store: no priming event and no event ids,
//                         so no stream can be resumed
//   config.sharedStore    one event store for every session, keyed by the stream
//                         id the SDK hands it, with ids "<streamId>:<n>": the
//                         store an application writes for Redis. Every
//                         session's standalone stream is "_GET_stream"
//                         (typescript-sdk #1004), so a resume of one session's
//                         GET stream replays the others' events. It logs
//                         {"resume":session,"after":id,"replayed":[{id,data}]}.
//
// It prints one line {"port":N} on stdout once listening. Commands arrive one
// per line on stdin, so the generator can inject server-side faults at a moment
// it chooses:
//   forget   close every session (as a restart or expiry would): later requests
//            carrying those ids get 404 -32001, as the SDK's transport answers
//   drain    close idle keep-alive connections, as a draining backend does, so
//            the client's next request opens a new connection (which the proxy
//            routes elsewhere)
// Every line it prints is JSON, for the generator's log.

import http from 'node:http';
import { getRequestListener } from '@hono/node-server';
import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import { InMemoryEventStore } from '@modelcontextprotocol/sdk/examples/shared/inMemoryEventStore.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { closeSessions, log, serveCommands } from './commands.mjs';
import { readMcpRequest } from './request.mjs';
import { newMcpServer } from './tools.mjs';

const config = JSON.parse(process.argv[2] ?? '{}');

// Keep-alive comments would add events nobody asked for to short captures.
const keepAliveMs = 10 * 60 * 1000;

/** @type {Map<string, WebStandardStreamableHTTPServerTransport>} */
const sessions = new Map();
// Permissive mode: an unknown session id the client keeps sending -> the id
// minted for it, so one lost session maps to one replacement, not one per request.
const recovered = new Map();

// SharedEventStore keeps each stream id's events in order under ids
// "<streamId>:<n>", whatever session sent them (the fault under test).
class SharedEventStore {
    constructor() {
        this.streams = new Map();
        this.next = 0;
    }
    async storeEvent(streamId, message) {
        const id = `${streamId}:${++this.next}`;
        if (!this.streams.has(streamId)) this.streams.set(streamId, []);
        this.streams.get(streamId).push({ id, message });
        return id;
    }
    async getStreamIdForEventId(eventId) {
        const i = eventId.lastIndexOf(':');
        return i > 0 && this.streams.has(eventId.slice(0, i)) ? eventId.slice(0, i) : undefined;
    }
    async replayEventsAfter(lastEventId, { send }) {
        const streamId = await this.getStreamIdForEventId(lastEventId);
        const events = streamId === undefined ? [] : this.streams.get(streamId);
        const at = events.findIndex(e => e.id === lastEventId);
        if (at < 0) return '';
        const replayed = [];
        for (const e of events.slice(at + 1)) {
            await send(e.id, e.message);
            replayed.push({ id: e.id, data: e.message.params?.data ?? null });
        }
        log({ resume: replaying, after: lastEventId, replayed });
        return streamId;
    }
}
const sharedStore = config.sharedStore ? new SharedEventStore() : undefined;
// replaying is the session whose resume the shared store is answering (one
// at a time in the scenarios that use it), for its log line.
let replaying;

async function newSession() {
    const transport = new WebStandardStreamableHTTPServerTransport({
        sessionIdGenerator: () => crypto.randomUUID(),
        eventStore: config.noEventStore ? undefined : (sharedStore ?? new InMemoryEventStore()),
        retryInterval: config.retryInterval,
        keepAliveMs,
        onsessioninitialized: id => {
            sessions.set(id, transport);
            log({ session: id, event: 'initialized' });
        }
    });
    await newMcpServer().connect(transport);
    return transport;
}

const jsonRpcHeaders = version => ({
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
    'mcp-protocol-version': version
});

// mintFor is the permissive backend's fault: it initialises a fresh session
// on the client's behalf (a synthetic initialize + initialized that never
// reach the wire) for a session id it never issued.
async function mintFor(unknownId, version) {
    const transport = await newSession();
    const base = 'http://backend.internal/mcp';
    const init = await transport.handleRequest(
        new Request(base, {
            method: 'POST',
            headers: jsonRpcHeaders(version),
            body: JSON.stringify({
                jsonrpc: '2.0',
                id: 0,
                method: 'initialize',
                params: { protocolVersion: version, capabilities: {}, clientInfo: { name: 'recovered-session', version: '0' } }
            })
        })
    );
    await init.text();
    const done = await transport.handleRequest(
        new Request(base, {
            method: 'POST',
            headers: { ...jsonRpcHeaders(version), 'mcp-session-id': transport.sessionId },
            body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' })
        })
    );
    await done.text();
    recovered.set(unknownId, transport.sessionId);
    log({ session: transport.sessionId, event: 'minted', for: unknownId });
    return transport;
}

// The transport's own answer for an unknown or closed session.
const sessionNotFound = () =>
    new Response(JSON.stringify({ jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' }, id: null }), {
        status: 404,
        headers: { 'Content-Type': 'application/json' }
    });

async function handle(req) {
    const { notFound, body, parsed } = await readMcpRequest(req);
    if (notFound) return notFound;
    const sid = req.headers.get('mcp-session-id');
    let transport;
    const headers = new Headers(req.headers);
    if (!sid) {
        if (req.method === 'POST' && parsed !== undefined && isInitializeRequest(parsed)) {
            transport = await newSession();
        } else {
            return new Response(
                JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message: 'Bad Request: Mcp-Session-Id header is required' }, id: null }),
                { status: 400, headers: { 'Content-Type': 'application/json' } }
            );
        }
    } else if (sessions.has(sid)) {
        transport = sessions.get(sid);
    } else if (config.permissive) {
        const alias = recovered.get(sid);
        transport = alias ? sessions.get(alias) : await mintFor(sid, req.headers.get('mcp-protocol-version') ?? '2025-11-25');
        headers.set('mcp-session-id', transport.sessionId);
    } else if (config.legacyRouting) {
        return new Response(
            JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message: 'Bad Request: No valid session ID provided' }, id: null }),
            { status: 400, headers: { 'Content-Type': 'application/json' } }
        );
    } else {
        return sessionNotFound();
    }
    if (req.method === 'GET' && req.headers.get('last-event-id')) replaying = sid;
    const forwarded = new Request(req.url, { method: req.method, headers, body });
    return transport.handleRequest(forwarded, { parsedBody: parsed });
}

const listener = getRequestListener(handle, { overrideGlobalObjects: false });
const httpServer = http.createServer(listener);

serveCommands({
    // Closing the transport ends its open SSE streams cleanly (chunked
    // terminator) and makes it answer 404; dropping it from the map makes
    // the router answer 404 too.
    forget: async () => log({ event: 'forgot', sessions: await closeSessions(sessions) }),
    drain: () => {
        httpServer.closeIdleConnections();
        log({ event: 'drained' });
    }
});

httpServer.listen(0, '127.0.0.1', () => log({ port: httpServer.address().port }));
