// An MCP server on Hono with @hono/mcp's StreamableHTTPTransport (its own
// implementation of the transport, not the SDK's) and its MemoryEventStore,
// one transport and store per session as its README's stateful example has,
// serving tools.mjs's tools. Its wire differs from the SDK's: event ids are
// random UUIDs (nothing orders them), the id line comes after the data, no
// priming event, no early close for polling, a resume of an id the store
// does not know answered 200 with nothing replayed, and a 404 for a protocol
// version it does not support.
//
// Usage: node hono_server.mjs '{}'
// It prints {"port":N} once listening. Commands on stdin, one per line:
//   forget   close every session (a restart or expiry): later requests
//            carrying those ids get 404, as server.mjs answers
// Every line it prints is JSON, for the generator's log.

import http from 'node:http';
import { getRequestListener } from '@hono/node-server';
import { Hono } from 'hono';
import { MemoryEventStore, StreamableHTTPTransport } from '@hono/mcp';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { closeSessions, log, serveCommands } from './commands.mjs';
import { newMcpServer } from './tools.mjs';

/** @type {Map<string, StreamableHTTPTransport>} */
const sessions = new Map();

const jsonRpcError = (c, status, code, message) => c.json({ jsonrpc: '2.0', error: { code, message }, id: null }, status);

const app = new Hono();
app.all('/mcp', async c => {
    const sid = c.req.header('mcp-session-id');
    if (sid) {
        const transport = sessions.get(sid);
        if (!transport) return jsonRpcError(c, 404, -32001, 'Session not found');
        return transport.handleRequest(c);
    }
    const body = c.req.method === 'POST' ? await c.req.json().catch(() => undefined) : undefined;
    if (body === undefined || !isInitializeRequest(body)) {
        return jsonRpcError(c, 400, -32000, 'Bad Request: Mcp-Session-Id header is required');
    }
    const transport = new StreamableHTTPTransport({
        sessionIdGenerator: () => crypto.randomUUID(),
        eventStore: new MemoryEventStore(),
        onsessioninitialized: id => {
            sessions.set(id, transport);
            log({ session: id, event: 'initialized' });
        }
    });
    await newMcpServer({ canPoll: false }).connect(transport);
    return transport.handleRequest(c, body);
});

const httpServer = http.createServer(getRequestListener(app.fetch, { overrideGlobalObjects: false }));

serveCommands({
    forget: async () => log({ event: 'forgot', sessions: await closeSessions(sessions) })
});

httpServer.listen(0, '127.0.0.1', () => log({ port: httpServer.address().port }));
