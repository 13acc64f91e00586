// Package cgodeps keeps Go's build cache honest about C headers.
//
// Go's build cache hashes a package's own files, not the headers its cgo
// code includes from other directories (golang/go#24355): after an edit of
// ring/include/kbridge.h or internal/burst/burst.h, a package that includes
// it from elsewhere is not rebuilt, and a long-lived tree runs C compiled
// against the old header (a fresh clone, whose ${SRCDIR} differs, does
// not). So each such package carries cgodeps.go, a generated list of those
// headers with their SHA-256: a header that changes changes a Go file of
// every package that includes it, and the cache rebuilds them.
//
// The test of this package checks every cgo package of the module: each
// header it includes from outside its directory is listed in its
// cgodeps.go with the header's current hash. When it fails, run
//
//	go test ./internal/cgodeps -update
package cgodeps
