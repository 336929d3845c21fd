package soakgen

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// FloodConfig shapes the traffic. Fractions are per session (or per tool
// call), drawn from a generator seeded with Seed and the client's number.
type FloodConfig struct {
	URL      string        // the server's endpoint, http://host:port/mcp
	Clients  int           // concurrent clients, each making one session after another
	Sessions int           // stop starting sessions after this many (0: no bound)
	Duration time.Duration // or after this long
	Rate     float64       // start at most this many sessions a second, over all clients (0: as fast as they go)
	Seed     uint64

	NewConnection float64       // a session on a connection of its own (the rest share their client's keep-alive one)
	Linger        float64       // of those that are abandoned, the connection is left open too, idle,
	LingerFor     time.Duration // for this long (then the client closes it)
	Resume        float64       // the server closes the tool stream early and the client resumes it
	SlowResume    float64       // of those, the server asks the client to wait SlowDelay before resuming, and waits as long to answer
	SlowDelay     time.Duration
	Long          float64 // the tool call streams LongSteps progress events instead of 1-4
	LongSteps     int
	Delete        float64 // the session ends with DELETE; otherwise it is abandoned
}

// FloodStats counts what the clients did.
type FloodStats struct {
	Sessions       int64 // initialize answered with a session id
	ToolCalls      int64
	Resumes        int64 // GETs with Last-Event-ID that delivered the rest of the stream
	SlowResumes    int64 // of those, the ones that waited SlowDelay twice
	Deletes        int64
	Abandoned      int64
	LongCalls      int64
	OwnConnections int64 // sessions on a connection of their own
	Lingering      int64 // of those, connections left open when abandoned
	Events         int64 // SSE events received (priming and close events included)
	Requests       int64
	Errors         int64
	FirstErrors    []string // the first few errors
	Elapsed        time.Duration
}

// Flood runs the clients until ctx is done, Sessions sessions were started
// or Duration passed, and waits for the sessions under way to finish.
func Flood(ctx context.Context, cfg FloodConfig) FloodStats {
	var (
		st      FloodStats
		started atomic.Int64
		mu      sync.Mutex
		wg      sync.WaitGroup
	)
	begin := time.Now()
	deadline := begin.Add(cfg.Duration)
	for i := range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &client{cfg: &cfg, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(i))), name: fmt.Sprintf("c%d", i)}
			c.keepAlive = &http.Client{Transport: newTransport(), Timeout: 20 * time.Second}
			defer c.keepAlive.CloseIdleConnections()
			for ctx.Err() == nil && time.Now().Before(deadline) {
				n := started.Add(1)
				if cfg.Sessions > 0 && n > int64(cfg.Sessions) {
					break
				}
				if cfg.Rate > 0 {
					// Session n starts n/Rate seconds after the first.
					at := begin.Add(time.Duration(float64(n-1) / cfg.Rate * float64(time.Second)))
					if !at.Before(deadline) {
						break
					}
					time.Sleep(time.Until(at))
				}
				err := c.session(ctx)
				if err != nil {
					c.st.Errors++
				}
				if err != nil && len(c.errs) < 3 {
					c.errs = append(c.errs, err.Error())
				}
			}
			mu.Lock()
			defer mu.Unlock()
			st.add(&c.st)
			for _, e := range c.errs {
				if len(st.FirstErrors) < 10 {
					st.FirstErrors = append(st.FirstErrors, e)
				}
			}
		}()
	}
	wg.Wait()
	st.Elapsed = time.Since(begin)
	return st
}

func (s *FloodStats) add(o *FloodStats) {
	s.Sessions += o.Sessions
	s.ToolCalls += o.ToolCalls
	s.Resumes += o.Resumes
	s.SlowResumes += o.SlowResumes
	s.Deletes += o.Deletes
	s.Abandoned += o.Abandoned
	s.LongCalls += o.LongCalls
	s.OwnConnections += o.OwnConnections
	s.Lingering += o.Lingering
	s.Events += o.Events
	s.Requests += o.Requests
	s.Errors += o.Errors
}

func newTransport() *http.Transport {
	return &http.Transport{MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute, DisableCompression: true}
}

type client struct {
	cfg       *FloodConfig
	rng       *rand.Rand
	name      string
	keepAlive *http.Client
	n         int // sessions made
	st        FloodStats
	errs      []string
}

// session makes one session: initialize, notifications/initialized, one
// tools/call streaming progress (resumed once when the server closes it
// early), then DELETE or nothing.
func (c *client) session(ctx context.Context) (err error) {
	c.n++
	cfg := c.cfg
	hc := c.keepAlive
	own := c.rng.Float64() < cfg.NewConnection
	del := c.rng.Float64() < cfg.Delete
	linger := own && !del && c.rng.Float64() < cfg.Linger
	if own {
		hc = &http.Client{Transport: newTransport(), Timeout: c.keepAlive.Timeout}
		c.st.OwnConnections++
		defer func() {
			if linger && err == nil {
				// Closed by the client, not by the server's idle
				// timeout: a server closing idle connections races
				// with a client reusing one (a POST then fails).
				c.st.Lingering++
				time.AfterFunc(cfg.LingerFor, hc.CloseIdleConnections)
				return
			}
			hc.CloseIdleConnections()
		}()
	}

	resp, err := c.post(ctx, hc, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"soakgen","version":"1.0.0"},"protocolVersion":"`+ProtocolVersion+`","capabilities":{}}}`)
	if err != nil {
		return err
	}
	session := resp.Header.Get("Mcp-Session-Id")
	body, err := readAll(resp)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || session == "" || !bytes.Contains(body, []byte(`"protocolVersion":"`+ProtocolVersion+`"`)) {
		return fmt.Errorf("initialize: %s, session %q: %s", resp.Status, session, body)
	}
	c.st.Sessions++
	if err := c.expect(ctx, hc, session, `{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}`, http.StatusAccepted); err != nil {
		return err
	}

	steps := 1 + c.rng.IntN(4)
	if c.rng.Float64() < cfg.Long {
		steps = cfg.LongSteps
		c.st.LongCalls++
	}
	closeAfter, delay := 0, time.Duration(0)
	if c.rng.Float64() < cfg.Resume {
		closeAfter = 1 + c.rng.IntN(steps)
		if c.rng.Float64() < cfg.SlowResume {
			delay = cfg.SlowDelay
		}
	}
	token := fmt.Sprintf("%s-%d", c.name, c.n)
	c.st.ToolCalls++
	resp, err = c.post(ctx, hc, session, fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"_meta":{"progressToken":%q},"name":"stream","arguments":{"steps":%d,"close_after":%d,"retry_ms":%d,"replay_delay_ms":%d}}}`,
		token, steps, closeAfter, delay.Milliseconds(), delay.Milliseconds()))
	if err != nil {
		return err
	}
	s, err := c.readStream(resp)
	if err != nil {
		return fmt.Errorf("tools/call: %w", err)
	}
	if !s.done {
		if s.last == "" || s.retry <= 0 {
			return fmt.Errorf("tools/call: stream closed without an event id (%q) or retry (%v)", s.last, s.retry)
		}
		time.Sleep(s.retry)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, cfg.URL, nil)
		c.headers(req, session)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Last-Event-ID", s.last)
		c.st.Requests++
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		if r, err := c.readStream(resp); err != nil || !r.done {
			return fmt.Errorf("resume from %s: done %v, %v", s.last, r.done, err)
		}
		c.st.Resumes++
		if delay > 0 {
			c.st.SlowResumes++
		}
	}

	if !del {
		c.st.Abandoned++
		return nil
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, cfg.URL, nil)
	c.headers(req, session)
	c.st.Requests++
	resp, err = hc.Do(req)
	if err != nil {
		return err
	}
	readAll(resp)
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("DELETE: %s", resp.Status)
	}
	c.st.Deletes++
	return nil
}

func (c *client) headers(req *http.Request, session string) {
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", ProtocolVersion)
	}
}

func (c *client) post(ctx context.Context, hc *http.Client, session, body string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.URL, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	c.headers(req, session)
	c.st.Requests++
	return hc.Do(req)
}

func (c *client) expect(ctx context.Context, hc *http.Client, session, body string, status int) error {
	resp, err := c.post(ctx, hc, session, body)
	if err != nil {
		return err
	}
	b, err := readAll(resp)
	if err == nil && resp.StatusCode != status {
		err = fmt.Errorf("%s: %s: %s", body, resp.Status, b)
	}
	return err
}

// sseResult is what a client keeps of an SSE response.
type sseResult struct {
	last  string        // the last event id
	retry time.Duration // the last reconnect delay announced
	done  bool          // the JSON-RPC result came
}

// readStream reads an SSE response to its end.
func (c *client) readStream(resp *http.Response) (sseResult, error) {
	var r sseResult
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		return r, fmt.Errorf("%s: %s", resp.Status, b)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			c.st.Events++
		case strings.HasPrefix(line, "id: "):
			r.last = line[len("id: "):]
		case strings.HasPrefix(line, "retry: "):
			if ms, err := strconv.Atoi(line[len("retry: "):]); err == nil {
				r.retry = time.Duration(ms) * time.Millisecond
			}
		case strings.HasPrefix(line, "data: ") && strings.Contains(line, `"result":`):
			r.done = true
		}
	}
	return r, sc.Err()
}

func readAll(resp *http.Response) ([]byte, error) {
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}
