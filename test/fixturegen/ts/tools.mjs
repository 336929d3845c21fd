// The fixtures' MCP server: the real @modelcontextprotocol/sdk McpServer
// with the two tools every node server of the generator serves (server.mjs
// on the SDK's transport, hono_server.mjs on @hono/mcp's).

import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

// pollAfter is ignored where the transport cannot close a stream early
// (canPoll false: @hono/mcp's); elsewhere a transport that cannot (no event
// store, a revision before 2025-11-25) fails the call.
export function newMcpServer({ canPoll = true } = {}) {
    const server = new McpServer({ name: 'fixture-ts-server', version: '1.0.0' }, { capabilities: { logging: {} } });
    // slow_write reports `steps` progress notifications (or log messages when
    // the caller sent no progress token) `delayMs` apart on the request's own
    // SSE stream, then returns. With pollAfter it closes its SSE stream after
    // that many steps (SEP-1699 polling), so the client has to resume.
    server.registerTool(
        'slow_write',
        {
            description: 'writes slowly, reporting progress',
            inputSchema: {
                label: z.string(),
                steps: z.number().int().min(1).max(20),
                delayMs: z.number().int().min(0).max(2000),
                pollAfter: z.number().int().min(0).optional()
            }
        },
        async ({ label, steps, delayMs, pollAfter }, extra) => {
            const token = extra._meta?.progressToken;
            for (let i = 1; i <= steps; i++) {
                await sleep(delayMs);
                if (token !== undefined) {
                    await extra.sendNotification({
                        method: 'notifications/progress',
                        params: { progressToken: token, progress: i, total: steps, message: `${label} step ${i}` }
                    });
                } else {
                    await extra.sendNotification({
                        method: 'notifications/message',
                        params: { level: 'info', logger: 'slow_write', data: `${label} step ${i} of ${steps}` }
                    });
                }
                if (canPoll && pollAfter !== undefined && i === pollAfter) {
                    if (!extra.closeSSEStream) {
                        throw new Error('closeSSEStream unavailable: no event store or protocol < 2025-11-25');
                    }
                    extra.closeSSEStream();
                }
            }
            await sleep(delayMs);
            return { content: [{ type: 'text', text: `wrote ${label}` }] };
        }
    );
    // announce sends `count` log messages `delayMs` apart with no related
    // request, so they travel on the standalone GET stream (_GET_stream).
    server.registerTool(
        'announce',
        {
            description: 'sends server-initiated notifications on the GET stream',
            inputSchema: {
                count: z.number().int().min(1).max(20),
                delayMs: z.number().int().min(0).max(2000),
                label: z.string().optional()
            }
        },
        async ({ count, delayMs, label }, extra) => {
            for (let i = 1; i <= count; i++) {
                await sleep(delayMs);
                await server.server.notification({
                    method: 'notifications/message',
                    params: { level: 'info', logger: 'announce', data: `announcement ${i} of ${count}${label ? ` for ${label} (session ${extra.sessionId})` : ''}` }
                });
            }
            return { content: [{ type: 'text', text: `announced ${count}` }] };
        }
    );
    return server;
}
