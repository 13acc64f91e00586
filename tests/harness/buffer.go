package harness

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer collects what a child process writes while the test reads it:
// a bytes.Buffer behind a mutex.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Count is how many times s occurs in what was written so far.
func (s *Buffer) Count(sub string) int { return strings.Count(s.String(), sub) }

// Tail returns the last n bytes of s, marked when cut.
func Tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// LastLine is the last line of s once surrounding white space is trimmed:
// what a failed command says last.
func LastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
