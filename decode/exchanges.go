// The exchange queue: requests awaiting their responses, in order.

package decode

import (
	"time"
)

// newExchange queues a new exchange as the next one awaiting a response.
// It is an allocation of its own, not part of its request's, because the
// request may be reused after the exchange's End while the exchange is
// still referred to.
func (c *conn) newExchange(method string) *exchange {
	c.exchanges++
	ex := &exchange{index: c.exchanges, method: method}
	if len(c.queue) >= MaxPipelinedRequests {
		c.w.stats.pipelineOverflows.Add(1)
		c.overflowed = true
		c.dequeue()
	}
	c.queue = append(c.queue, ex)
	return ex
}

// dequeue drops the oldest queued exchange. It shifts the rest down rather
// than reslicing from the front, which would make every append of a
// keep-alive connection reallocate; the queue is nearly always one long.
func (c *conn) dequeue() {
	n := copy(c.queue, c.queue[1:])
	c.queue[n] = nil
	c.queue = c.queue[:n]
}

// popExchange takes the oldest unanswered exchange, or makes one for a
// response whose request was not seen.
func (c *conn) popExchange(ts time.Time) *exchange {
	if c.pairingLost {
		c.endQueued(ts)
	}
	if len(c.queue) > 0 {
		ex := c.queue[0]
		c.dequeue()
		return ex
	}
	c.exchanges++
	c.w.stats.httpExchanges.Add(1)
	return &exchange{index: c.exchanges}
}
