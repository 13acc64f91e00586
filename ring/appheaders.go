package ring

import "embed"

// AppHeaders are the app's headers (kbridge.h, KNI's API over it), as make
// install and the package install them. Code that compiles against them
// from another directory, as an app does (ringtest), refers to AppHeaders:
// Go's build cache hashes only a package's own files, and the reference
// makes every byte of the headers part of what that code is built from. A
// binary that does not refer to it does not carry it.
//
//go:embed kbridge*.h rte_kni*.h
var AppHeaders embed.FS
