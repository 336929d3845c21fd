package guard

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"

	"github.com/replaywatch/replaywatch/internal/atomicfile"
)

// Token is what a client needs to resume a stream after a break, or after
// a restart: its session and the id of the last event it received whole.
// The two travel together: a cursor is meaningful only in its session.
type Token struct {
	Session     string `json:"session"`
	LastEventID string `json:"last_event_id"`
}

// TokenStore keeps the token of each stream, keyed by the request that
// opened it (StreamKey). The guard saves a stream's token after every
// complete event with an id; a client resumes from Load.
type TokenStore interface {
	Save(stream string, t Token) error
	Load(stream string) (Token, bool, error)
}

// StreamKey names the stream a request opens: a POST's by its first
// JSON-RPC id, a GET's (the standalone stream) by its session.
func StreamKey(method, session, firstID string) string {
	if method == "GET" {
		return "get " + session
	}
	return "post " + session + " " + firstID
}

// MaxTokens bounds the streams a MemoryTokens or FileTokens keeps a token
// for: a long-lived client opens a stream per call, and a token is worth
// keeping only until its stream ends. Past it, the stream saved first is
// forgotten.
const MaxTokens = 4096

// tokens is a store's map with the order its streams were first saved in.
type tokens struct {
	m     map[string]Token
	order []string
}

func (ts *tokens) save(stream string, t Token) {
	if ts.m == nil {
		ts.m = map[string]Token{}
	}
	if _, ok := ts.m[stream]; !ok {
		if len(ts.order) >= MaxTokens {
			delete(ts.m, ts.order[0])
			ts.order = ts.order[1:]
		}
		ts.order = append(ts.order, stream)
	}
	ts.m[stream] = t
}

// MemoryTokens is the default TokenStore: in memory, for the life of the
// process, at most MaxTokens streams.
type MemoryTokens struct {
	mu sync.Mutex
	ts tokens
}

func (s *MemoryTokens) Save(stream string, t Token) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ts.save(stream, t)
	return nil
}

func (s *MemoryTokens) Load(stream string) (Token, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.ts.m[stream]
	return t, ok, nil
}

// FileTokens keeps the tokens in a JSON file, rewritten whole (to a
// temporary file, synced and renamed) on every Save, so a process that
// restarts resumes where it was and a crash leaves the old file or the new
// one, never half of either. It keeps at most MaxTokens streams; those read
// from the file count as saved before any new one, in the order of their
// names.
type FileTokens struct {
	Path string

	mu     sync.Mutex
	loaded bool
	ts     tokens
}

func (s *FileTokens) load() error {
	if s.loaded {
		return nil
	}
	b, err := os.ReadFile(s.Path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var m map[string]Token
	if err == nil {
		if err := json.Unmarshal(b, &m); err != nil {
			return fmt.Errorf("guard tokens %s: %w", s.Path, err)
		}
	}
	s.ts = tokens{}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		s.ts.save(k, m[k])
	}
	s.loaded = true
	return nil
}

func (s *FileTokens) Save(stream string, t Token) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.load(); err != nil {
		return err
	}
	s.ts.save(stream, t)
	b, err := json.Marshal(s.ts.m)
	if err != nil {
		return err
	}
	return atomicfile.Replace(s.Path, b)
}

func (s *FileTokens) Load(stream string) (Token, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.load(); err != nil {
		return Token{}, false, err
	}
	t, ok := s.ts.m[stream]
	return t, ok, nil
}
