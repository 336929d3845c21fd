// An MCP server built with tmcp (an implementation of MCP independent of
// @modelcontextprotocol/sdk, with its own Streamable HTTP transport,
// @tmcp/transport-http) serving server.mjs's tools, for the probes that put
// other SDKs' clients in front of it. Its wire differs from the SDKs' in
// ways the detector must take calmly: no event ids (no resumption), every
// session id accepted whether it issued it or not (never a 404), a fresh
// session id on any POST without one, 409 for a second standalone stream,
// server-initiated messages only as broadcasts to every session's standalone
// stream, and the per-request revision (2026-07-28) beside the session ones.
//
// Usage: node tmcp_server.mjs '{}'
// It prints {"port":N} once listening. Commands on stdin, one per line:
//   forget   a restart: close every standalone stream and forget every
//            session's state. tmcp still serves the old ids (it checks none).
// Every line it prints is JSON, for the generator's log.

import http from 'node:http';
import { getRequestListener } from '@hono/node-server';
import { McpServer } from 'tmcp';
import { ZodJsonSchemaAdapter } from '@tmcp/adapter-zod';
import { HttpTransport } from '@tmcp/transport-http';
import { InMemoryInfoSessionManager, InMemoryStreamSessionManager } from '@tmcp/session-manager';
import { z } from 'zod';
import { log, serveCommands } from './commands.mjs';

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

// OpenStreams remembers which sessions hold a standalone stream, so that
// forget can close them.
class OpenStreams extends InMemoryStreamSessionManager {
    ids = new Set();
    create(id, controller) {
        this.ids.add(id);
        return super.create(id, controller);
    }
    delete(id) {
        this.ids.delete(id);
        return super.delete(id);
    }
}

const server = new McpServer(
    { name: 'fixture-tmcp-server', version: '1.0.0', description: 'replaywatch probe server' },
    { adapter: new ZodJsonSchemaAdapter(), capabilities: { tools: { listChanged: true }, logging: {} } }
);

// slow_write reports `steps` steps `delayMs` apart on the request's own
// stream, each as a log message and, when the caller sent a progress token,
// a progress notification (tmcp does not tell a tool whether it got one),
// then returns. pollAfter is accepted and ignored: tmcp cannot close a stream
// early.
server.tool(
    {
        name: 'slow_write',
        description: 'writes slowly, reporting progress',
        schema: z.object({
            label: z.string(),
            steps: z.number().int().min(1).max(20),
            delayMs: z.number().int().min(0).max(2000),
            pollAfter: z.number().int().min(0).optional()
        })
    },
    async ({ label, steps, delayMs }) => {
        for (let i = 1; i <= steps; i++) {
            await sleep(delayMs);
            server.progress(i, steps, `${label} step ${i}`);
            server.log('info', `${label} step ${i} of ${steps}`, 'slow_write');
        }
        await sleep(delayMs);
        return { content: [{ type: 'text', text: `wrote ${label}` }] };
    }
);

// announce sends `count` notifications `delayMs` apart with no related
// request. tmcp has no way to address one session's standalone stream: a
// tools/list_changed broadcast reaches every open one.
server.tool(
    {
        name: 'announce',
        description: 'sends server-initiated notifications on the GET stream',
        schema: z.object({
            count: z.number().int().min(1).max(20),
            delayMs: z.number().int().min(0).max(2000),
            label: z.string().optional()
        })
    },
    async ({ count, delayMs }) => {
        for (let i = 1; i <= count; i++) {
            await sleep(delayMs);
            server.changed('tools');
        }
        return { content: [{ type: 'text', text: `announced ${count}` }] };
    }
);

let streams;
let transport;
function start() {
    streams = new OpenStreams();
    transport = new HttpTransport(server, {
        path: '/mcp',
        allowedOrigins: true,
        sessionManager: { streams, info: new InMemoryInfoSessionManager() }
    });
}
start();

async function handle(req) {
    return (await transport.respond(req)) ?? new Response('not found', { status: 404 });
}

const httpServer = http.createServer(getRequestListener(handle, { overrideGlobalObjects: false }));

serveCommands({
    forget: () => {
        const ids = [...streams.ids];
        for (const id of ids) streams.delete(id);
        start();
        log({ event: 'forgot', streams: ids });
    }
});

httpServer.listen(0, '127.0.0.1', () => log({ port: httpServer.address().port }));
