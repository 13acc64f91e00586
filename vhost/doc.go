// Package vhost is mode vhost's pure Go: the virtio feature bits a
// vhost-user frontend negotiates and what they mean for the data path
// (FeatureNames, OffloadsOf), and the server socket's directory and group
// (PrepareSocket, LookupGroup). The backend itself, compiled against
// librte_vhost, is in package ring with the rest of kbridge's DPDK side
// (ring.StartVhost, ring.VhostQueue, ring.VhostIn); vhostusertest is a
// vhost-user frontend in Go for tests.
package vhost
