// What both fixture servers (server.mjs, crowd_server.mjs) do first with a
// request: anything but /mcp is 404, and a POST body is read and parsed
// once (parsed is undefined when it is not JSON: the transport answers the
// parse error itself).
export async function readMcpRequest(req) {
    if (new URL(req.url).pathname !== '/mcp') {
        return { notFound: new Response('not found\n', { status: 404 }) };
    }
    let body;
    let parsed;
    if (req.method === 'POST') {
        body = await req.text();
        try {
            parsed = JSON.parse(body);
        } catch {
            parsed = undefined;
        }
    }
    return { body, parsed };
}
