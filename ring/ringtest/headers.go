package ringtest

import "github.com/kbridge/kbridge/include/kbridge"

// primary.c includes kbridge.h from include/kbridge (cgo.go's -I), a
// directory Go's build cache does not hash for this package: depending on
// the headers' bytes through kbridge.Headers rebuilds it whenever they
// change.
var _ = kbridge.Headers
