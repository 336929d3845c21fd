// The chaos flows' random draws (client.mjs, aisdk_client.mjs).

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
