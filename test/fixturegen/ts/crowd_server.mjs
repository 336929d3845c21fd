// A TypeScript MCP shop server (the real @modelcontextprotocol/sdk Streamable
// HTTP transport, the SDK's example InMemoryEventStore per session) for the
// crowd scenario: many clients, one endpoint, a session store that loses a
// random subset of its sessions mid-run. Its charge log is the scenario's
// ground truth: every execution of charge_card is one line.
//
// Usage: node crowd_server.mjs '<json config>'
//   config.chargeLog  file to append one JSON line per executed tool call:
//                     {"charge":order,"session":id,"rpcId":id} for charge_card,
//                     {"read":order,"session":id,"rpcId":id} for get_order
//
// Tools: charge_card (not read-only, not idempotent: every call charges) and
// get_order (annotated readOnlyHint, so calling it twice is harmless).
//
// It prints {"port":N} once listening. Commands on stdin, one a line:
//   forget F   close a random fraction F (0..1) of the live sessions, as a
//              partial restart or store loss would: later requests carrying
//              those ids get 404 -32001
// Every line it prints is JSON.

import fs from 'node:fs';
import http from 'node:http';
import { getRequestListener } from '@hono/node-server';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import { InMemoryEventStore } from '@modelcontextprotocol/sdk/examples/shared/inMemoryEventStore.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { closeSessions, log, serveCommands } from './commands.mjs';
import { readMcpRequest } from './request.mjs';

const config = JSON.parse(process.argv[2] ?? '{}');
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));
const record = obj => {
    if (config.chargeLog) fs.appendFileSync(config.chargeLog, JSON.stringify(obj) + '\n');
};

/** @type {Map<string, WebStandardStreamableHTTPServerTransport>} */
const sessions = new Map();

function newMcpServer() {
    const server = new McpServer({ name: 'fixture-ts-shop', version: '1.0.0' });
    server.registerTool(
        'charge_card',
        {
            description: 'charges the card on file for an order (every call charges)',
            inputSchema: { order: z.string(), amountCents: z.number().int().min(1) },
            annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false }
        },
        async ({ order, amountCents }, extra) => {
            await sleep(5);
            record({ charge: order, amountCents, session: extra.sessionId, rpcId: extra.requestId });
            return { content: [{ type: 'text', text: `charged ${order}` }] };
        }
    );
    server.registerTool(
        'get_order',
        {
            description: 'reads an order',
            inputSchema: { order: z.string() },
            annotations: { readOnlyHint: true }
        },
        async ({ order }, extra) => {
            record({ read: order, session: extra.sessionId, rpcId: extra.requestId });
            return { content: [{ type: 'text', text: `order ${order}: paid` }] };
        }
    );
    return server;
}

async function newSession() {
    const transport = new WebStandardStreamableHTTPServerTransport({
        sessionIdGenerator: () => crypto.randomUUID(),
        eventStore: new InMemoryEventStore(),
        keepAliveMs: 10 * 60 * 1000,
        onsessioninitialized: id => {
            sessions.set(id, transport);
            log({ session: id, event: 'initialized' });
        }
    });
    await newMcpServer().connect(transport);
    return transport;
}

async function handle(req) {
    const { notFound, body, parsed } = await readMcpRequest(req);
    if (notFound) return notFound;
    const sid = req.headers.get('mcp-session-id');
    let transport;
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
    } else {
        return new Response(JSON.stringify({ jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' }, id: null }), {
            status: 404,
            headers: { 'Content-Type': 'application/json' }
        });
    }
    const forwarded = new Request(req.url, { method: req.method, headers: req.headers, body });
    return transport.handleRequest(forwarded, { parsedBody: parsed });
}

const httpServer = http.createServer(getRequestListener(handle, { overrideGlobalObjects: false }));

serveCommands({
    forget: async (fraction = '1') => {
        const ids = await closeSessions(sessions, [...sessions.keys()].filter(() => Math.random() < Number(fraction)));
        log({ event: 'forgot', sessions: ids, kept: sessions.size });
    }
});

httpServer.listen(0, '127.0.0.1', () => log({ port: httpServer.address().port }));
