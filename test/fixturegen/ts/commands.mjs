// The node servers' side of the generator's line protocol: every line they
// print is JSON (log), and commands arrive on stdin one per line, a name and
// its arguments, so the generator can inject server-side faults at a moment
// it chooses. The generator closing stdin means the scenario is over.

import readline from 'node:readline';

export const log = obj => process.stdout.write(JSON.stringify(obj) + '\n');

// serveCommands runs handlers[name](...args) for each command line.
export function serveCommands(handlers) {
    readline.createInterface({ input: process.stdin }).on('line', async line => {
        const [name, ...args] = line.trim().split(/\s+/);
        if (name === '') return;
        const handler = handlers[name];
        if (!handler) {
            log({ error: `unknown command ${JSON.stringify(line)}` });
            return;
        }
        await handler(...args);
    });
    process.stdin.on('end', () => process.exit(0));
}

// closeSessions closes the transports of ids (every session by default) and
// drops them from sessions, a Map of session id to transport, so that the
// router answers 404 for them; it returns the ids.
export async function closeSessions(sessions, ids = [...sessions.keys()]) {
    for (const id of ids) {
        const t = sessions.get(id);
        sessions.delete(id);
        await t.close();
    }
    return ids;
}
