//go:build !kbridge_testhook

package ring

// TestHook reports whether this build has the ring test hook
// (ring/testhook.go): a product build does not.
const TestHook = false

// occupyForTest occupies nothing: only the test hook's build
// (ring/testhook.go) takes an address before EAL starts.
func occupyForTest(int) {}
