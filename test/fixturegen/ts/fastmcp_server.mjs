// An MCP server on FastMCP (the TypeScript framework `fastmcp`, whose HTTP
// side is mcp-proxy's startHTTPServer around the SDK's transport) serving
// server.mjs's tools, for the fastmcp probes. Its wire differs from
// server.mjs's: event ids "<stream>_<ms>_<counter>_<random>" from
// mcp-proxy's InMemoryEventStore (one per session), mcp-proxy's own handler
// for the per-request revision (2026-07-28) beside the SDK's sessions (a 400
// from FastMCP 4, which the SDK 1.x builds), and by FastMCP's code a ping of
// every session every 5 s (no probe session lives that long).
//
// Usage: node fastmcp_server.mjs '{}'
// It prints {"port":N} once listening. Commands on stdin, one per line:
//   forget   close every session (as an expiry would): its server and
//            transport close, its streams end, and later requests carrying
//            its id get 404 from mcp-proxy's router

import net from 'node:net';
import { FastMCP } from 'fastmcp';
import { z } from 'zod';
import { log, serveCommands } from './commands.mjs';

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

const server = new FastMCP({ name: 'fixture-fastmcp-server', version: '1.0.0' });

// slow_write reports `steps` steps `delayMs` apart on the call's own stream:
// progress (sent when the call carried a token) and a log message each.
// pollAfter is ignored: FastMCP's tools cannot close their stream early.
server.addTool({
    name: 'slow_write',
    description: 'writes slowly, reporting progress',
    parameters: z.object({
        label: z.string(),
        steps: z.number().int().min(1).max(20),
        delayMs: z.number().int().min(0).max(2000),
        pollAfter: z.number().int().min(0).optional()
    }),
    execute: async ({ label, steps, delayMs }, { reportProgress, log: toolLog }) => {
        for (let i = 1; i <= steps; i++) {
            await sleep(delayMs);
            await reportProgress({ progress: i, total: steps });
            toolLog.info(`${label} step ${i} of ${steps}`);
        }
        await sleep(delayMs);
        return `wrote ${label}`;
    }
});

// announce: FastMCP gives a tool no way to send a notification unrelated to
// its call, so its announcements are log messages on the call's stream.
server.addTool({
    name: 'announce',
    description: 'sends announcements',
    parameters: z.object({
        count: z.number().int().min(1).max(20),
        delayMs: z.number().int().min(0).max(2000),
        label: z.string().optional()
    }),
    execute: async ({ count, delayMs, label }, { log: toolLog }) => {
        for (let i = 1; i <= count; i++) {
            await sleep(delayMs);
            toolLog.info(`announcement ${i} of ${count}${label ? ` for ${label}` : ''}`);
        }
        return `announced ${count}`;
    }
});

// freePort asks the system for a port nobody listens on: FastMCP does not
// say which one it got for port 0.
const freePort = () =>
    new Promise((resolve, reject) => {
        const s = net.createServer().listen(0, '127.0.0.1', () => {
            const { port } = s.address();
            s.close(() => resolve(port));
        });
        s.on('error', reject);
    });

const port = await freePort();
await server.start({ transportType: 'httpStream', httpStream: { port, host: '127.0.0.1', endpoint: '/mcp' } });

serveCommands({
    forget: async () => {
        const sessions = [...server.sessions];
        await Promise.all(sessions.map(s => s.close()));
        log({ event: 'forgot', sessions: sessions.length });
    }
});

log({ port });
