package guard

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
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

// MemoryTokens is the default TokenStore: in memory, for the life of the
// process.
type MemoryTokens struct {
	mu sync.Mutex
	m  map[string]Token
}

func (s *MemoryTokens) Save(stream string, t Token) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]Token{}
	}
	s.m[stream] = t
	return nil
}

func (s *MemoryTokens) Load(stream string) (Token, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.m[stream]
	return t, ok, nil
}

// FileTokens keeps the tokens in a JSON file, rewritten whole (to a
// temporary file, synced and renamed) on every Save, so a process that
// restarts resumes where it was and a crash leaves the old file or the new
// one, never half of either.
type FileTokens struct {
	Path string

	mu sync.Mutex
	m  map[string]Token
}

func (s *FileTokens) load() error {
	if s.m != nil {
		return nil
	}
	s.m = map[string]Token{}
	b, err := os.ReadFile(s.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &s.m); err != nil {
		return fmt.Errorf("guard tokens %s: %w", s.Path, err)
	}
	return nil
}

func (s *FileTokens) Save(stream string, t Token) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.load(); err != nil {
		return err
	}
	s.m[stream] = t
	b, err := json.Marshal(s.m)
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
	t, ok := s.m[stream]
	return t, ok, nil
}
