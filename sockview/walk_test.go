package sockview

import (
	"testing"
	"time"
)

// A reading walks the TCP connections first, then only when a frame asked
// for it (and no sooner than WalkShare times the last walk's duration
// after it), or when MaxWalkGap has passed without one.
func TestAWalkIsDueWhenAFrameAsksOrTheGapIsLong(t *testing.T) {
	now := time.Now()
	took := 5 * time.Millisecond
	for _, c := range []struct {
		name   string
		since  time.Duration // since the last walk ended; 0: none yet
		missed bool
		want   bool
	}{
		{"the first reading", 0, false, true},
		{"nothing asked, soon after", time.Second, false, false},
		{"nothing asked, for MaxWalkGap", MaxWalkGap, false, true},
		{"asked, within WalkShare", WalkShare*took - time.Millisecond, true, false},
		{"asked, past WalkShare", WalkShare * took, true, true},
	} {
		r := &Reader{walkTook: took}
		if c.since != 0 {
			r.walkEnd = now.Add(-c.since)
		}
		if got := r.WalkDue(now, c.missed); got != c.want {
			t.Errorf("%s: WalkDue %v, want %v", c.name, got, c.want)
		}
	}
}
