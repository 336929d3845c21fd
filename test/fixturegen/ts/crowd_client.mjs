// Many TypeScript MCP client applications (the real @modelcontextprotocol/sdk
// Client and StreamableHTTPClientTransport) in one node process, all the same
// shop agent (one clientInfo, one address), each with its own keep-alive
// connections as separate processes would have. They place orders
// (charge_card; the readonly ones then get_order) until the server loses their session (404),
// then react by kind:
//   naive     re-initialise and re-send the last answered charge_card call, unasked
//             (a naive "retry on re-init" wrapper: the order may be charged twice)
//   readonly  re-initialise and re-send the last answered get_order call (read-only,
//             annotated so in tools/list: harmless)
//   correct   re-initialise and carry on with the next order; only a call the
//             server answered 404 (it did not run) is sent again
//
// Usage: node crowd_client.mjs '<json config>'
//   config.url        the MCP endpoint (the recording proxy)
//   config.kinds      one kind per client
//   config.rounds     orders each client places
//   config.gapMs      [min, max] pause between two orders
//   config.orderPrefix  makes this run's order ids its own (two recordings
//                     never charge the same order)
//   config.sharedPool true: every client shares the process's fetch pool
//                     (connections carry several clients' requests)
//
// It prints {"ready":N} once every client has initialised and listed tools,
// one line per session loss and re-send, and {"done":...} at the end.

import http from 'node:http';
import { Readable } from 'node:stream';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const config = JSON.parse(process.argv[2] ?? '{}');
const log = obj => process.stdout.write(JSON.stringify(obj) + '\n');
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));
const [gapMin, gapMax] = config.gapMs ?? [150, 350];
const callTimeoutMs = config.callTimeoutMs ?? 4000;

// agentFetch is a fetch over node:http with one keep-alive agent: a client
// application's own connection pool.
function agentFetch(agent) {
    return (url, init = {}) =>
        new Promise((resolve, reject) => {
            const u = new URL(url);
            const headers = {};
            new Headers(init.headers).forEach((v, k) => (headers[k] = v));
            const req = http.request(
                { hostname: u.hostname, port: u.port, path: u.pathname + u.search, method: init.method ?? 'GET', headers, agent, signal: init.signal },
                res => {
                    const h = new Headers();
                    for (const [k, v] of Object.entries(res.headers)) {
                        if (Array.isArray(v)) v.forEach(x => h.append(k, x));
                        else if (v !== undefined) h.set(k, v);
                    }
                    const empty = res.statusCode === 204 || res.statusCode === 304;
                    if (empty) res.resume();
                    resolve(new Response(empty ? null : Readable.toWeb(res), { status: res.statusCode, statusText: res.statusMessage, headers: h }));
                }
            );
            req.on('error', reject);
            req.end(init.body ?? undefined);
        });
}

const is404 = err => (err instanceof StreamableHTTPError && err.code === 404) || /\b404\b/.test(String(err?.message));

class App {
    constructor(index, kind) {
        this.index = index;
        this.kind = kind;
        this.fetch = config.sharedPool ? undefined : agentFetch(new http.Agent({ keepAlive: true, maxSockets: 4 }));
        this.sessions = [];
        this.resent = [];
    }

    async connect() {
        const transport = new StreamableHTTPClientTransport(new URL(config.url), this.fetch ? { fetch: this.fetch } : undefined);
        const client = new Client({ name: 'shop-agent', version: '1.0.0' });
        // A 404 on another request of the session (the standalone GET's
        // reconnect, a resume) while a call waits: the session is gone.
        client.onerror = err => {
            if (is404(err)) this.onLost?.('lost');
        };
        await client.connect(transport);
        await client.listTools();
        this.client = client;
        this.transport = transport;
        this.sessions.push(transport.sessionId);
    }

    // call returns 'ok'; 'rejected' when the server answered the call's own
    // POST 404 (it did not run); 'lost' when the session was lost while the
    // call was in flight (it may have run); or 'failed'.
    async call(name, args) {
        try {
            const lost = new Promise(resolve => (this.onLost = resolve));
            const r = await Promise.race([this.client.callTool({ name, arguments: args }, undefined, { timeout: callTimeoutMs }), lost]);
            return r === 'lost' ? 'lost' : 'ok';
        } catch (err) {
            if (is404(err)) return 'rejected';
            log({ client: this.index, call: name, failed: String(err?.message ?? err) });
            return 'failed';
        }
    }

    // recover re-initialises after the session was lost during step (a
    // tools/call of name with args, answered 404 or lost in flight) and
    // re-sends what the client's kind re-sends.
    async recover(name, args, how) {
        const old = this.sessions.at(-1);
        await this.client.close().catch(() => {});
        await this.connect();
        log({ client: this.index, kind: this.kind, lost: old, during: name, how, session: this.sessions.at(-1) });
        let again;
        switch (this.kind) {
            case 'naive':
                // The last charge the server answered: it runs again.
                if (this.lastCharge) again = ['charge_card', this.lastCharge];
                break;
            case 'readonly':
                if (this.lastRead) again = ['get_order', this.lastRead];
                break;
            default:
                // A call answered 404 did not run: sending it again is right.
                if (how === 'rejected') again = [name, args];
        }
        if (!again) return;
        this.resent.push(again[1].order);
        log({ client: this.index, kind: this.kind, resend: again[0], order: again[1].order, session: this.sessions.at(-1) });
        if ((await this.call(...again)) !== 'ok') throw new Error(`client ${this.index}: re-sent ${again[0]} failed`);
    }

    async step(name, args) {
        const how = await this.call(name, args);
        if (how === 'ok') return true;
        if (how === 'failed') throw new Error(`client ${this.index}: ${name} failed`);
        await this.recover(name, args, how);
        return false;
    }

    async run() {
        for (let round = 0; round < config.rounds; round++) {
            await sleep(gapMin + Math.random() * (gapMax - gapMin));
            const order = `ord-${config.orderPrefix ?? 'x'}-${String(this.index).padStart(2, '0')}-${round}`;
            const charge = { order, amountCents: 1000 + this.index * 10 + round };
            if (!(await this.step('charge_card', charge))) continue;
            this.lastCharge = charge;
            log({ client: this.index, kind: this.kind, charged: order });
            // Only the re-reading clients look their orders up.
            if (this.kind !== 'readonly') continue;
            if (await this.step('get_order', { order })) this.lastRead = { order };
        }
        await this.client.close();
    }
}

try {
    const apps = config.kinds.map((kind, i) => new App(i, kind));
    await Promise.all(apps.map(a => a.connect()));
    log({ ready: apps.length });
    await Promise.all(apps.map(a => a.run()));
    log({ done: true, clients: apps.length, sessions: apps.reduce((n, a) => n + a.sessions.length, 0), resent: apps.reduce((n, a) => n + a.resent.length, 0) });
    process.exit(0);
} catch (err) {
    log({ error: String(err?.stack ?? err) });
    process.exit(1);
}
