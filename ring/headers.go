package ring

import "github.com/kbridge/kbridge/include/kbridge"

// The C of this package includes the app's headers from include/kbridge
// (cgo.go's -I), a directory Go's build cache does not hash for this
// package: depending on their bytes through kbridge.Headers rebuilds it
// whenever they change.
var _ = kbridge.Headers
