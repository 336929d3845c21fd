// A TypeScript MCP client application (the real @modelcontextprotocol/sdk
// Client and StreamableHTTPClientTransport, which negotiate 2025-11-25, the
// SDK's latest revision) driven by the Go fixture generator.
//
// Usage: node client.mjs '<json config>'
//   config.url     the MCP endpoint (the recording proxy)
//   config.flow    what the application does (see flows below)
//   config.call    the slow_write arguments
//   config.timeoutMs  request timeout for the call
//   config.tenants    the sharedStore flow's tenants (names)
//   config.giveUpAfterMs  when the giveUp flow abandons each call
//   config.chaos      the chaos flow's {seed, clients, durationMs}
//
// It prints one JSON line per step on stdout; lines {"wait":"<name>"} mean it
// waits for one line on stdin before going on, so the generator can inject a
// server-side fault between two application steps. Exit status 0 means the
// flow ran as the scenario expects (the generator checks the lines too).

import readline from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { runChaos } from './chaos.mjs';

const config = JSON.parse(process.argv[2] ?? '{}');
const log = obj => process.stdout.write(JSON.stringify(obj) + '\n');
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

const stdinLines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();
async function waitFor(name) {
    log({ wait: name });
    const { done } = await stdinLines.next();
    if (done) throw new Error(`stdin closed while waiting for ${name}`);
}

// connect opens a new session. sessionLost resolves with the first HTTP 404
// the transport reports (a POST answered 404, or a resume GET answered 404):
// the signal a real application re-initialises on. resumeRejected resolves
// once a GET carrying last-event-id has been answered 404: when the server
// closes two streams at once, the standalone GET's reconnect (no cursor) and
// the call's resume race, and a flow that must put the resume on the wire
// waits for it before closing the client, which would cancel it.
async function connect(name, headers) {
    let rejected;
    const resumeRejected = new Promise(resolve => (rejected = resolve));
    const watchResumes = async (url, init) => {
        const response = await fetch(url, init);
        if (init?.method === 'GET' && response.status === 404 && new Headers(init.headers).has('last-event-id')) rejected();
        return response;
    };
    const transport = new StreamableHTTPClientTransport(new URL(config.url), {
        fetch: watchResumes,
        ...(headers ? { requestInit: { headers } } : {})
    });
    const client = new Client({ name, version: '1.0.0' });
    let lost;
    const sessionLost = new Promise(resolve => (lost = resolve));
    client.onerror = err => {
        log({ client: name, onerror: String(err?.message ?? err) });
        if (err instanceof StreamableHTTPError && err.code === 404) lost(err);
    };
    await client.connect(transport);
    log({ client: name, session: transport.sessionId, protocol: transport.protocolVersion });
    return { client, transport, sessionLost, resumeRejected };
}

// callSlowWrite calls the slow_write tool with a progress token (onprogress),
// remembering the last event id the transport saw (onresumptiontoken), as an
// application that persists its resume cursor would.
async function callSlowWrite(conn, args, cursor = {}) {
    const started = Date.now();
    const result = await conn.client.callTool({ name: 'slow_write', arguments: args }, undefined, {
        timeout: config.timeoutMs ?? 8000,
        onprogress: p => log({ progress: p.progress, total: p.total }),
        onresumptiontoken: token => (cursor.lastEventId = token)
    });
    log({ result: result.content?.[0]?.text, ms: Date.now() - started });
    return result;
}

// listToolsGets404 sends tools/list on a session the server no longer
// knows, requires the 404 and logs note.
async function listToolsGets404(c, note) {
    try {
        await c.client.listTools();
    } catch (err) {
        if (!(err instanceof StreamableHTTPError && err.code === 404)) throw err;
        log({ app: note, error: String(err.message) });
        return;
    }
    throw new Error('listTools succeeded on a session the server no longer knows');
}

// startOverAfter404 makes calls on a first session, waits for the server
// to forget it and sees a tools/list get 404; then, on a new client (a new
// session), it makes the call after.
async function startOverAfter404(calls, after) {
    const c = await connect('fixture-ts-client');
    for (const call of calls) await callSlowWrite(c, call);
    await waitFor('forget');
    await listToolsGets404(c, 'got 404, starting a new session');
    await c.client.close();
    const c2 = await connect('fixture-ts-client');
    await callSlowWrite(c2, after);
    await c2.client.close();
}

const flows = {
    // One call; the transport resumes by itself if its stream breaks.
    // With config.callMayFail the call failing (a timeout after a broken
    // resume) is part of the scenario, not an error of the run.
    async call() {
        const c = await connect('fixture-ts-client');
        try {
            await callSlowWrite(c, config.call);
        } catch (err) {
            if (!config.callMayFail) throw err;
            log({ call: 'failed', error: String(err.message) });
            // The SDK POSTs notifications/cancelled for the timed-out call
            // without awaiting it; let it reach the wire before closing.
            await sleep(300);
        }
        await c.client.close();
    },

    // The session is lost mid-call (404 on the resume); the application opens
    // a new session and re-issues the identical call without asking whether
    // the first one ran: silent re-init with a re-issued tools/call.
    async reinitRetool() {
        const c = await connect('fixture-ts-client');
        const first = callSlowWrite(c, config.call).then(
            () => log({ first: 'completed' }),
            err => log({ first: 'failed', error: String(err.message) })
        );
        await c.sessionLost;
        await c.resumeRejected;
        log({ app: 'session lost, re-initialising and re-issuing the same call' });
        await c.client.close();
        await first;
        const c2 = await connect('fixture-ts-client');
        await callSlowWrite(c2, config.call);
        await c2.client.close();
    },

    // The session is lost mid-call; the application re-initialises and then
    // resumes the standalone stream with the OLD session's last event id.
    async reinitLastEventId() {
        const c = await connect('fixture-ts-client');
        const cursor = {};
        const first = callSlowWrite(c, config.call, cursor).then(
            () => log({ first: 'completed' }),
            err => log({ first: 'failed', error: String(err.message) })
        );
        await c.sessionLost;
        await c.resumeRejected;
        log({ app: 'session lost, re-initialising and resuming with the old cursor', lastEventId: cursor.lastEventId });
        await c.client.close();
        await first;
        const c2 = await connect('fixture-ts-client');
        await c2.transport.resumeStream(cursor.lastEventId);
        log({ resumed: cursor.lastEventId });
        // Let the (empty) resumed stream's head reach the capture.
        await sleep(300);
        await c2.client.close();
    },

    // A completed call, then the session is lost while idle; the next request
    // gets 404 and the application starts over cleanly: a new session, a
    // different call, nothing of the old session reused.
    cleanNewSession: () => startOverAfter404([config.call], config.secondCall),

    // A periodic job: the same call twice, each completed before the next;
    // the session is lost, a request that is not the job's gets 404, and
    // the application starts over and runs the job once more.
    pollerNewSession: () => startOverAfter404([config.call, config.call], config.call),

    // Server-initiated notifications on the standalone GET stream; the proxy
    // breaks that stream and the transport resumes it by itself.
    async announce() {
        const c = await connect('fixture-ts-client');
        // Give the standalone GET stream time to open before the server writes.
        await sleep(200);
        const r = await c.client.callTool({ name: 'announce', arguments: config.announce });
        log({ result: r.content?.[0]?.text });
        await sleep(config.settleMs ?? 1500);
        await c.client.close();
    },

    // A call whose stream breaks; while the transport's resume is on its
    // way, the server expires the session, and the application's next
    // request gets 404. The resume then arrives (config.callMayFail: the call
    // times out after it is answered).
    async expiredResume() {
        const c = await connect('fixture-ts-client');
        const call = callSlowWrite(c, config.call).then(
            () => log({ call: 'completed' }),
            err => log({ call: 'failed', error: String(err.message) })
        );
        await waitFor('expired');
        await listToolsGets404(c, 'got 404 for the expired session');
        await waitFor('resumed');
        await call;
        await sleep(300);
        await c.client.close();
    },

    // A completed call, then the session is lost while idle, and the server
    // answers the dead session 400 instead of 404: the transport reports a
    // 400, nothing says "re-initialise", and the application retries once
    // more (400 again) and gives up, stuck on the dead session.
    async stuckAfterForget() {
        const c = await connect('fixture-ts-client');
        await callSlowWrite(c, config.call);
        await waitFor('forget');
        for (let attempt = 1; attempt <= 2; attempt++) {
            try {
                await c.client.listTools();
                throw new Error('listTools succeeded on a forgotten session');
            } catch (err) {
                if (!(err instanceof StreamableHTTPError && err.code === 400)) throw err;
                log({ app: `got 400 on attempt ${attempt}, no re-initialisation`, error: String(err.message) });
            }
        }
        await c.client.close();
    },

    // The application lists the tools and calls slow_write with a request
    // timeout. When the call fails (its stream broken with no event id to
    // resume from, it times out), the application, which never heard back,
    // sends the identical call again in the same session.
    async reissueAfterBreak() {
        const c = await connect('fixture-ts-client');
        const { tools } = await c.client.listTools();
        log({ tools: tools.map(t => t.name) });
        const first = await callSlowWrite(c, config.call).then(() => '', err => String(err.message));
        if (first === '') throw new Error('the cut call completed');
        log({ app: 'call failed, sending it again', error: first });
        await callSlowWrite(c, config.call);
        await c.client.close();
    },

    // The application gives three slow_write calls up, each giveUpAfterMs
    // in: the first by its AbortSignal and the second by the request
    // timeout (for both the SDK POSTs notifications/cancelled and the
    // server sends no answer), the third by ending the session (DELETE)
    // while it runs, as an application shutting down does.
    async giveUp() {
        const c = await connect('fixture-ts-client');
        const call = opts => c.client.callTool({ name: 'slow_write', arguments: config.call }, undefined, { onprogress: () => {}, ...opts });
        const ac = new AbortController();
        setTimeout(() => ac.abort('user gave up'), config.giveUpAfterMs);
        await call({ signal: ac.signal }).then(
            () => { throw new Error('the aborted call completed'); },
            err => log({ gaveUp: 'abort', error: String(err.message) })
        );
        await call({ timeout: config.giveUpAfterMs }).then(
            () => { throw new Error('the timed-out call completed'); },
            err => log({ gaveUp: 'timeout', error: String(err.message) })
        );
        const third = call({}).then(
            () => log({ third: 'completed' }),
            err => log({ gaveUp: 'delete', error: String(err.message) })
        );
        await sleep(config.giveUpAfterMs);
        await c.transport.terminateSession();
        log({ app: 'session deleted' });
        await c.client.close();
        await third;
    },

    // Several tenants (own session, own Authorization, own clientInfo), each
    // with its standalone GET stream, ask for announcements at once; the
    // proxy breaks the first tenant's GET stream and its transport resumes
    // it. Every announcement a client receives is logged with whom it was for.
    async sharedStore() {
        const conns = [];
        for (const tenant of config.tenants) {
            const c = await connect(`fixture-ts-${tenant}`, { authorization: `Bearer token-${tenant}` });
            c.client.setNotificationHandler(LoggingMessageNotificationSchema, n => log({ tenant, got: n.params.data }));
            conns.push(c);
            // One tenant's standalone GET stream opens before the next
            // tenant connects, so the first GET on the wire is the first's.
            await sleep(300);
        }
        const results = await Promise.all(
            conns.map((c, i) => c.client.callTool({ name: 'announce', arguments: { ...config.announce, label: config.tenants[i] } }))
        );
        results.forEach((r, i) => log({ tenant: config.tenants[i], result: r.content?.[0]?.text }));
        await sleep(config.settleMs ?? 1500);
        for (const c of conns) await c.client.close();
    }
};

// The chaos flow (the ts-chaos probe): config.chaos.clients applications,
// each making sessions for config.chaos.durationMs, every one doing what a
// correct application may: one to six calls, some overlapping, some given
// up (AbortSignal or a short timeout), some polling (pollAfter), some
// announcements on the standalone stream, pauses; a session ends with
// DELETE or is abandoned, and a 404 ends it too (the next one starts
// afresh). No call is ever re-issued: labels are unique.
flows.chaos = async function chaos() {
    const result = await runChaos(config.chaos, async (i, s, rnd, counts) => {
        let c;
        try {
            c = await connect(`fixture-ts-client`);
        } catch (err) {
            counts.failed++;
            await sleep(100);
            return;
        }
        counts.sessions++;
        // Announcements are log messages: ask for them (a server that
        // does not log refuses, and nothing else changes).
        await c.client.setLoggingLevel('info').catch(() => {});
        const running = [];
        let lost = false;
        c.sessionLost.then(() => (lost = true));
        const ops = 1 + rnd.int(6);
        for (let o = 0; o < ops && !lost; o++) {
            const label = `a${i}-s${s}-o${o}`;
            // A call whose session is forgotten while its stream is
            // cut never gets an answer: no application waits the SDK's
            // default minute for it.
            const opts = { timeout: 3000 };
            const pick = rnd.int(6);
            if (pick === 0) {
                const ac = new AbortController();
                setTimeout(() => ac.abort('gave up'), 50 + rnd.int(300));
                opts.signal = ac.signal;
            } else if (pick === 1) {
                opts.timeout = 50 + rnd.int(300);
            }
            if (rnd.int(2) === 0) opts.onprogress = () => {};
            let req;
            if (rnd.int(4) === 0) {
                req = { name: 'announce', arguments: { count: 1 + rnd.int(3), delayMs: 20 + rnd.int(60), label } };
            } else {
                const steps = 1 + rnd.int(4);
                const args = { label, steps, delayMs: 20 + rnd.int(60) };
                if (rnd.int(4) === 0) args.pollAfter = 1 + rnd.int(steps);
                req = { name: 'slow_write', arguments: args };
            }
            counts.calls++;
            const call = c.client.callTool(req, undefined, opts).catch(() => counts.failed++);
            if (rnd.int(3) === 0) running.push(call);
            else await call;
            if (rnd.int(8) === 0) await sleep(300 + rnd.int(700));
        }
        await Promise.all(running);
        if (!lost && rnd.int(3) !== 0) await c.transport.terminateSession().catch(() => {});
        await c.client.close();
    });
    log({ chaos: result });
};

const flow = flows[config.flow];
if (!flow) {
    log({ error: `unknown flow ${config.flow}` });
    process.exit(2);
}
try {
    await flow();
    log({ done: true });
    process.exit(0);
} catch (err) {
    log({ error: String(err?.stack ?? err) });
    process.exit(1);
}
