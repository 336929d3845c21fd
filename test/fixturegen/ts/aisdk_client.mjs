// MCP client applications on the Vercel AI SDK's MCP client (@ai-sdk/mcp,
// its own Streamable HTTP transport, not the SDK's), for the aisdk probes.
// Its wire differs from the SDK clients': MCP-Protocol-Version 2025-11-25 on
// the initialize itself, no resumption of a request's stream (a cut call
// waits for its timeout), the standalone stream resumed with Last-Event-ID
// only after an error, never a new session on 404 (the application starts
// one), and DELETE on every close.
//
// Usage: node aisdk_client.mjs '<json config>'
//   config.url    the MCP endpoint (the recording proxy)
//   config.flow   "chaos" (the only flow)
//   config.chaos  {seed, clients, durationMs}: client.mjs's chaos flow, on
//                 this client: applications making sessions of one to six
//                 calls (some overlapping, some given up by AbortSignal),
//                 each ended by close (DELETE) or abandoned; a 404 ends a
//                 session (its client dropped, not closed) and the
//                 application starts afresh, re-issuing nothing (labels are
//                 unique).
//
// It prints JSON lines; the last is {"chaos":{...counts, settled}}.

import { createMCPClient } from '@ai-sdk/mcp';
import { runChaos } from './chaos.mjs';

const config = JSON.parse(process.argv[2] ?? '{}');
const log = obj => process.stdout.write(JSON.stringify(obj) + '\n');
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

async function chaos() {
    const result = await runChaos(config.chaos, async (i, s, rnd, counts) => {
        let lost = false;
        let client;
        try {
            client = await createMCPClient({
                transport: { type: 'http', url: config.url },
                name: 'fixture-aisdk-client',
                // Notifications reach it as errors ("Unsupported message
                // type"): it handles none.
                onUncaughtError: () => {}
            });
        } catch {
            counts.failed++;
            await sleep(100);
            return;
        }
        counts.sessions++;
        const running = [];
        const ops = 1 + rnd.int(6);
        for (let o = 0; o < ops && !lost; o++) {
            const label = `a${i}-s${s}-o${o}`;
            // A cut call is never answered: no application waits for
            // it long.
            const giveUp = rnd.int(3) === 0 ? 50 + rnd.int(300) : 3000;
            const args =
                rnd.int(4) === 0
                    ? { name: 'announce', args: { count: 1 + rnd.int(3), delayMs: 20 + rnd.int(60), label } }
                    : { name: 'slow_write', args: { label, steps: 1 + rnd.int(4), delayMs: 20 + rnd.int(60) } };
            counts.calls++;
            const call = client
                .callTool({ ...args, options: { abortSignal: AbortSignal.timeout(giveUp) } })
                .catch(err => {
                    counts.failed++;
                    if (err?.statusCode === 404) lost = true;
                });
            if (rnd.int(3) === 0) running.push(call);
            else await call;
            if (rnd.int(8) === 0) await sleep(300 + rnd.int(700));
        }
        await Promise.all(running);
        // close() DELETEs the session: an application drops a client
        // whose session got 404 instead, and abandons one now and then.
        if (!lost && rnd.int(4) !== 0) await client.close().catch(() => {});
    });
    log({ chaos: result });
}

if (config.flow !== 'chaos') {
    log({ error: `unknown flow ${JSON.stringify(config.flow)}` });
    process.exit(2);
}
await chaos();
process.exit(0);
