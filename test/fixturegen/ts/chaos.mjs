// What the chaos flows share (client.mjs, aisdk_client.mjs): their seeded
// draws and their applications' loop.

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

// chaosRandom is mulberry32: a small seeded generator, so a seed draws the
// same choices (the timing still varies).
export function chaosRandom(seed) {
    let a = seed >>> 0;
    const next = () => {
        a = (a + 0x6d2b79f5) >>> 0;
        let t = a;
        t = Math.imul(t ^ (t >>> 15), t | 1);
        t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
        return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
    return { next, int: n => Math.floor(next() * n) };
}

// runChaos runs `clients` applications, each making one session after
// another (session(i, s, rnd, counts) for application i's session s) until
// durationMs has passed, and returns the counts and whether every
// application settled: an SDK call or close that never settles (a stream
// cut while its session was forgotten) must not keep the capture from ending.
export async function runChaos({ seed = 1, clients = 4, durationMs = 8000 } = {}, session) {
    const deadline = Date.now() + durationMs;
    const counts = { sessions: 0, calls: 0, failed: 0 };
    const app = async i => {
        const rnd = chaosRandom(seed * 1000 + i);
        for (let s = 0; Date.now() < deadline; s++) await session(i, s, rnd, counts);
    };
    const settled = await Promise.race([
        Promise.all(Array.from({ length: clients }, (_, i) => app(i))).then(() => true),
        sleep(durationMs + 8000).then(() => false)
    ]);
    return { ...counts, settled };
}
