//go:build !kbridge_testhook

package ring

// TestHook reports whether this build has the ring test hook
// (ring/testhook.go): a product build does not.
const TestHook = false
