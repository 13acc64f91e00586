package ringtest

import "github.com/kbridge/kbridge/ring"

// primary.c includes ../kbridge.h, a header of another directory, which Go's
// build cache does not hash for this package: depending on the headers'
// bytes through ring.AppHeaders rebuilds it whenever they change.
var _ = ring.AppHeaders
